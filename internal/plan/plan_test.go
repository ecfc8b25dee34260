package plan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// Append gives every attachment at the file offset of a USDT probe with a
// semaphore that semaphore, among the attachments of the file appended and
// those of the plan's files that are the same file (device and inode):
// the kernel keeps one uprobe per file offset and refuses another
// semaphore there. Other offsets and other files keep their own.
func TestAppendSharesSemaphoresAtAnOffset(t *testing.T) {
	same := procfs.FileVersion{FileID: procfs.FileID{Dev: 8, Ino: 42}}
	other := procfs.FileVersion{FileID: procfs.FileID{Dev: 8, Ino: 43}}
	plan := &Plan{Probes: make([]Probe, 5)}
	first := plan.Append(&FileSpec{File: File{ID: same}, Attachments: []Attachment{
		{Probe: 0, FileOffset: 0x1250},                       // a function's entry on the probe's nop
		{Probe: 1, FileOffset: 0x1250, Return: true},         // and its return
		{Probe: 2, FileOffset: 0x1250, RefCtrOffset: 0x3038}, // the USDT probe
		{Probe: 3, FileOffset: 0x2000},                       // another function
		{Probe: 4, FileOffset: 0x3000, RefCtrOffset: 0x303a}, // another probe, alone at its offset
	}})
	// Another target's files: the same file with a function on the probe
	// only, and another file at the same offset.
	again := plan.Append(&FileSpec{File: File{ID: same}, Attachments: []Attachment{{Probe: 0, FileOffset: 0x1250}}})
	elsewhere := plan.Append(&FileSpec{File: File{ID: other}, Attachments: []Attachment{{Probe: 0, FileOffset: 0x1250}}})
	// A file without an identity shares only within itself.
	unknown := plan.Append(&FileSpec{Attachments: []Attachment{{Probe: 0, FileOffset: 0x1250}}})

	semaphores := func(fi int) []uint64 {
		var out []uint64
		r := plan.Files[fi].Attachments
		for _, a := range plan.Attachments[r.Start:r.End] {
			out = append(out, a.RefCtrOffset)
		}
		return out
	}
	require.Len(t, plan.Attachments, 8)
	assert.Equal(t, []uint64{0x3038, 0x3038, 0x3038, 0, 0x303a}, semaphores(first))
	assert.Equal(t, []uint64{0x3038}, semaphores(again))
	assert.Equal(t, []uint64{0}, semaphores(elsewhere))
	assert.Equal(t, []uint64{0}, semaphores(unknown))
}
