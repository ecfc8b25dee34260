package procfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKernelHas(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "proc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc", "kallsyms"), []byte(
		"0000000000000000 T _text\n"+
			"0000000000000000 T __x64_sys_uretprobe\n"+
			"0000000000000000 t arch_uprobe_optimize\n"+
			"0000000000000000 t helper\t[nf_tables]\n"+
			"garbage\n"), 0o644))
	got, err := FS{Root: root}.KernelHas("__x64_sys_uretprobe", "arch_uprobe_optimize", "__x64_sys_uprobe", "helper")
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"__x64_sys_uretprobe": true, "arch_uprobe_optimize": true, "helper": true}, got)

	_, err = FS{Root: t.TempDir()}.KernelHas("x")
	assert.Error(t, err)
}
