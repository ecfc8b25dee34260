package procfs

import "os"

// ProcessMemory reads the memory of process PID of the live system, with
// process_vm_readv(2) on Linux. The caller needs ptrace read access to the
// process (CAP_SYS_PTRACE for other users' processes), as for its root
// directory. Everything read is the process's to choose: check it.
type ProcessMemory struct {
	PID int
}

// ExecutableID returns the identity (device and inode) of process pid's
// executable: stat(2) of /proc/PID/exe.
func (f FS) ExecutableID(pid int) (FileID, error) {
	fi, err := os.Stat(f.pidPath(pid, "exe"))
	if err != nil {
		return FileID{}, err
	}
	return IDOf(fi), nil
}
