package tracer

import (
	"time"

	"golang.org/x/sys/unix"
)

// WallClockOffset returns the nanoseconds to add to a CLOCK_MONOTONIC
// reading (what bpf_ktime_get_ns returns) to get Unix time. It reads the
// pair of clocks several times and keeps the tightest bracket.
func WallClockOffset() (int64, error) {
	best := int64(-1)
	var offset int64
	for range 8 {
		var ts unix.Timespec
		before := time.Now().UnixNano()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return 0, err
		}
		after := time.Now().UnixNano()
		if width := after - before; best < 0 || width < best {
			best = width
			offset = before + width/2 - ts.Nano()
		}
	}
	return offset, nil
}
