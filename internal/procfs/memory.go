package procfs

// ProcessMemory reads the memory of process PID of the live system, with
// process_vm_readv(2) on Linux. The caller needs ptrace read access to the
// process (CAP_SYS_PTRACE for other users' processes), as for its root
// directory. Everything read is the process's to choose: check it.
type ProcessMemory struct {
	PID int
}
