package eval

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/report"
)

// TestPredictCorpusJudgesTheEvaluationsCorpus: PredictCorpus walks the
// corpus an evaluation with the same parameters generates, and judges
// every handover and failure of it.
func TestPredictCorpusJudgesTheEvaluationsCorpus(t *testing.T) {
	corpus := Corpus{Handovers: 40, Seed: 3, ScenarioDuration: 2 * time.Minute, Mobilities: DefaultMobilities, Scale: 0.1}
	daemon := filepath.Join(t.TempDir(), "m2hod")
	require.NoError(t, os.WriteFile(daemon, []byte("a build"), 0o755))
	m, err := Prepare(Options{Out: t.TempDir(), Corpus: corpus, Variants: []string{"scubic", "scubic+m2ho"}, M2hod: daemon})
	require.NoError(t, err)
	handovers, failures := 0, 0
	for _, e := range m.Corpus {
		handovers += e.Handovers
		failures += e.RLFs
	}

	p, err := PredictCorpus(corpus)
	require.NoError(t, err)
	assert.Equal(t, len(m.Corpus), p.Scenarios)
	assert.Equal(t, handovers, p.Handovers)
	m2ho, ok := p.Result.Predictor(report.PredictorM2HO)
	require.True(t, ok)
	overall, ok := m2ho.Class(diag.AllClasses)
	require.True(t, ok)
	assert.Equal(t, handovers+failures, overall.Recall.Den, "every handover and failure judged")
	assert.Positive(t, overall.Precision.Den)
	atCommand, ok := p.Result.Predictor(report.PredictorAtCommand)
	require.True(t, ok)
	commanded, ok := atCommand.Class(diag.AllClasses)
	require.True(t, ok)
	assert.Equal(t, handovers, commanded.RecallHandovers.Num, "every handover has its command")
	for _, iv := range []Interval{p.Precision, p.Recall} {
		assert.True(t, iv.Valid)
		assert.Equal(t, p.Scenarios, iv.Scenarios)
		assert.LessOrEqual(t, iv.Low, iv.Value)
		assert.GreaterOrEqual(t, iv.High, iv.Value)
	}
	assert.InDelta(t, float64(overall.Precision.Num)/float64(overall.Precision.Den), p.Precision.Value, 1e-9)

	var out bytes.Buffer
	require.NoError(t, p.Write(&out))
	assert.Contains(t, out.String(), "## Table 4")
	assert.Contains(t, out.String(), "## Table 5")
	assert.Contains(t, out.String(), "M2HO, 95% intervals over scenarios: precision "+p.Precision.Percent(false))
}
