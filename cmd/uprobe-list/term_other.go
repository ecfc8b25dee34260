//go:build !unix

package main

import "os"

// terminalWidth: the width of a terminal is not asked for off Unix
// ($COLUMNS or -width say it).
func terminalWidth(*os.File) (int, bool) { return 0, false }
