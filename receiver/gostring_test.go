package receiver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// A stripped Go HTTP server (no DWARF): a string parameter and a string
// result read through Go's register ABI, as the probe browser offers them
// (arg0:gostring, retval:gostring): right on every request.
func TestGoStringResultWithoutDWARF(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 20
	bin := testutil.BuildGo(t, "httpserver", true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	testutil.StartCommand(t, "listening", bin, addr)
	s := startReceiver(t, []config.Target{{Path: bin, Spans: []config.Span{{
		Function:       "main.Greeting",
		Attributes:     map[string]string{"name": "arg0:gostring"},
		ExitAttributes: map[string]string{"greeting": "retval:gostring"},
	}}}})
	client := &http.Client{}
	for i := 0; i < n; i++ {
		req, err := http.NewRequest("GET", "http://"+addr+"/x", nil)
		require.NoError(t, err)
		req.Host = fmt.Sprintf("h%d", i)
		resp, err := client.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := allSpans(s.traces)
	require.Len(t, spans, n)
	seen := map[string]bool{}
	for _, sp := range spans {
		a := sp.Attributes()
		name := attrStr(t, a, "name")
		assert.False(t, seen[name], name)
		seen[name] = true
		assert.Equal(t, "hello "+name, attrStr(t, a, "greeting"), "the string result")
	}
	for i := 0; i < n; i++ {
		assert.True(t, seen[fmt.Sprintf("h%d", i)], "h%d", i)
	}
}
