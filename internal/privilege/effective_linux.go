package privilege

import "golang.org/x/sys/unix"

// Effective returns the calling thread's effective capability set
// (capget(2)). Capabilities are per thread; the collector's threads share
// one set unless something changes a thread's on purpose.
func Effective() (Set, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, err
	}
	return Set(data[0].Effective) | Set(data[1].Effective)<<32, nil
}
