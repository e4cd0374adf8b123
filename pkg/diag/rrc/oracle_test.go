package rrc

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
)

// oracleChannels names the channels in the oracle's input format.
var oracleChannels = map[diag.RRCChannel]string{
	diag.ChannelDLDCCH:                     "dl_dcch",
	diag.ChannelULDCCH:                     "ul_dcch",
	diag.ChannelULCCCH:                     "ul_ccch",
	diag.ChannelBCCHDLSCH:                  "bcch_dl_sch",
	diag.ChannelRRCReconfiguration:         "rrc_reconfiguration",
	diag.ChannelRRCReconfigurationComplete: "rrc_reconfiguration_complete",
}

// oracleResult is one line of tools/rrc-oracle/oracle.py output.
type oracleResult struct {
	Summary json.RawMessage `json:"summary"`
	Error   string          `json:"error"`
}

// oraclePython is the test-only virtualenv's interpreter (.venv at the
// repository root, made by the Makefile); the test skips without it.
func oraclePython(t *testing.T) string {
	t.Helper()
	python := filepath.Join(repoRoot(t), ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		t.Skipf("pycrate oracle virtualenv absent (%s); create it with: python3 -m venv .venv && .venv/bin/pip install -r tools/rrc-oracle/requirements.txt", python)
	}
	return python
}

// TestSchemasMatchGenerator checks the committed schemas are what
// gen_schema.py makes from the pinned pycrate.
func TestSchemasMatchGenerator(t *testing.T) {
	python := oraclePython(t)
	for _, rat := range []string{"lte", "nr"} {
		t.Run(rat, func(t *testing.T) {
			cmd := exec.Command(python, filepath.Join(repoRoot(t), "tools", "rrc-oracle", "gen_schema.py"), rat)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			generated, err := cmd.Output()
			require.NoError(t, err, "gen_schema.py: %s", stderr.String())
			committed, err := os.ReadFile(filepath.Join("schema", rat+".json"))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(generated, committed), "schema/%s.json differs from gen_schema.py output; regenerate it (schema/README.md)", rat)
		})
	}
}

// runOracle decodes the PDUs with pycrate through the test-only
// virtualenv, or skips.
func runOracle(t *testing.T, msgs []diag.RRCMessage) []oracleResult {
	t.Helper()
	root := repoRoot(t)
	python := oraclePython(t)
	var in bytes.Buffer
	for _, m := range msgs {
		fmt.Fprintf(&in, "%s %s %s\n", m.RAT, oracleChannels[m.Channel], hex.EncodeToString(m.PDU))
	}
	cmd := exec.Command(python, filepath.Join(root, "tools", "rrc-oracle", "oracle.py"))
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "oracle: %s", stderr.String())
	var results []oracleResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r oracleResult
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		results = append(results, r)
	}
	require.NoError(t, sc.Err())
	require.Len(t, results, len(msgs), "one oracle result per PDU")
	return results
}

// labelled is a PDU with where it came from, for failure messages.
type labelled struct {
	label string
	msg   diag.RRCMessage
}

// oracleTally counts the outcome of a differential comparison.
type oracleTally struct {
	compared, mismatches, nativeFailures, oracleFailures int
}

// compareWithOracle decodes every message natively and checks the summary
// against pycrate's, field by field (as JSON), in one oracle run.
func compareWithOracle(t *testing.T, pdus []labelled) map[string]*oracleTally {
	t.Helper()
	msgs := make([]diag.RRCMessage, len(pdus))
	for i, p := range pdus {
		msgs[i] = p.msg
	}
	results := runOracle(t, msgs)
	tallies := map[string]*oracleTally{}
	for i, p := range pdus {
		tally := tallies[p.label]
		if tally == nil {
			tally = &oracleTally{}
			tallies[p.label] = tally
		}
		m := p.msg
		where := fmt.Sprintf("%s #%d %s %s %x", p.label, i, m.RAT, m.Channel, m.PDU)
		s, err := Summarize(m.RAT, m.Channel, m.PDU)
		if results[i].Error != "" {
			// pycrate cannot decode it: nothing to compare against.
			tally.oracleFailures++
			t.Logf("%s: pycrate failed (%s); native: %v", where, results[i].Error, err)
			continue
		}
		tally.compared++
		if !assert.NoError(t, err, where) {
			tally.nativeFailures++
			continue
		}
		native, err := json.Marshal(s)
		require.NoError(t, err)
		if !assert.JSONEq(t, string(results[i].Summary), string(native), where) {
			tally.mismatches++
		}
	}
	return tallies
}

// TestOracle is the differential test: every committed vector and every
// RRC PDU of the shared captures, decoded natively and by pycrate (in one
// oracle run), with zero mismatches and zero native failures on what
// pycrate decodes. Without shared data the vectors are still compared.
func TestOracle(t *testing.T) {
	var pdus []labelled
	vectors := map[string]bool{}
	for _, v := range loadVectors(t) {
		pdus = append(pdus, labelled{label: v.name, msg: v.msg})
		vectors[v.name] = true
	}
	var captures []capture
	if _, err := shareddata.Locate(""); err != nil {
		t.Log(err, "- comparing the committed vectors only")
	} else {
		captures = realCaptures(t)
	}
	for _, c := range captures {
		for _, m := range c.messages {
			pdus = append(pdus, labelled{label: c.name, msg: m})
		}
	}
	tallies := compareWithOracle(t, pdus)
	for name := range vectors {
		assert.Equal(t, &oracleTally{compared: 1}, tallies[name], "vector %s", name)
	}
	var total oracleTally
	for _, c := range captures {
		tally := tallies[c.name]
		if tally == nil {
			tally = &oracleTally{}
		}
		t.Logf("%-45s compared %5d  mismatches %d  native failures %d  pycrate failures %d",
			c.name, tally.compared, tally.mismatches, tally.nativeFailures, tally.oracleFailures)
		total.compared += tally.compared
		total.mismatches += tally.mismatches
		total.nativeFailures += tally.nativeFailures
	}
	t.Logf("total: %d vectors and %d capture PDUs compared with pycrate", len(vectors), total.compared)
	assert.Zero(t, total.mismatches, "summaries differing from pycrate")
	assert.Zero(t, total.nativeFailures, "PDUs pycrate decodes that the native decoder rejects")
}

// vector is one committed test PDU.
type vector struct {
	name string
	msg  diag.RRCMessage
}

// loadVectors reads testdata/*.txt: "name rat channel hex" per line,
// '#' comments.
func loadVectors(t testing.TB) []vector {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	byToken := map[string]diag.RRCChannel{}
	for ch, token := range oracleChannels {
		byToken[token] = ch
	}
	var out []vector
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		for n, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			f := strings.Fields(line)
			require.Len(t, f, 4, "%s:%d", file, n+1)
			ch, ok := byToken[f[2]]
			require.True(t, ok, "%s:%d: channel %q", file, n+1, f[2])
			pdu, err := hex.DecodeString(f[3])
			require.NoError(t, err, "%s:%d", file, n+1)
			out = append(out, vector{name: f[0], msg: diag.RRCMessage{RAT: diag.RAT(f[1]), Channel: ch, PDU: pdu}})
		}
	}
	return out
}

// vectorByName returns the committed vector of that name.
func vectorByName(t testing.TB, name string) diag.RRCMessage {
	t.Helper()
	for _, v := range loadVectors(t) {
		if v.name == name {
			return v.msg
		}
	}
	t.Fatalf("no test vector %q", name)
	return diag.RRCMessage{}
}
