package debuginfo

import "errors"

// The errors callers can test for with errors.Is. Each is wrapped in a
// message that names the file, function or variable concerned.
var (
	// ErrNoDebugInfo says no DWARF was found for a file: neither in it nor
	// in a separate debug file (build id, debuglink, debuginfod).
	ErrNoDebugInfo = errors.New("no debuginfo")
	// ErrBuildIDMismatch says a separate debug file belongs to another build.
	ErrBuildIDMismatch = errors.New("build id mismatch")
	// ErrCRCMismatch says a .gnu_debuglink file has another CRC32.
	ErrCRCMismatch = errors.New("debuglink crc32 mismatch")
	// ErrNotFound says a name (function, variable, field, line) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrOptimizedOut says a variable exists but has no location at the pc.
	ErrOptimizedOut = errors.New("optimized out here")
	// ErrTooComplex says a location or CFA rule exists but is beyond what the
	// engine's fetches can express.
	ErrTooComplex = errors.New("location too complex")
	// ErrNotFetchable says a value's type cannot be stored as one fetch.
	ErrNotFetchable = errors.New("not directly fetchable")
	// ErrUnsupportedMachine says the ELF machine is not one the package knows.
	ErrUnsupportedMachine = errors.New("unsupported machine")
	// ErrRegisterUnreadable says a location needs a register the engine
	// cannot read.
	ErrRegisterUnreadable = errors.New("register not readable by the engine")
	// ErrMalformed says DWARF, CFI or an ELF note is truncated or invalid.
	ErrMalformed = errors.New("malformed debuginfo")
)
