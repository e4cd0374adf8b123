package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
)

// reattachingDatapath is a datapath whose interface goes and comes back.
type reattachingDatapath struct {
	*fakeDatapath
	mode atomic.Value
}

func (r *reattachingDatapath) AttachMode() string { return r.mode.Load().(string) }

// TestMetricsFollowAttachState checks that m2hod_info's attach_mode is
// read when Prometheus scrapes, from the same source as /status, rather
// than fixed at start.
func TestMetricsFollowAttachState(t *testing.T) {
	dp := &reattachingDatapath{fakeDatapath: newFakeDatapath()}
	dp.mode.Store(datapath.AttachTCX)
	src := &chanSource{events: make(chan diag.Event)}
	d, err := open(testConfig(t), nil, opener{
		datapath: func(datapath.Options) (datapathAPI, error) { return dp, nil },
		source:   func(string, diagsrc.Options) (diag.Source, error) { return src, nil },
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	handler := d.handler()
	get := func(path string) string {
		t.Helper()
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, rec.Code, path)
		return rec.Body.String()
	}
	statusMode := func() string {
		t.Helper()
		var st struct {
			AttachMode string `json:"attach_mode"`
		}
		require.NoError(t, json.Unmarshal([]byte(get("/status")), &st))
		return st.AttachMode
	}

	for _, mode := range []string{datapath.AttachTCX, datapath.AttachNone, datapath.AttachClsact} {
		dp.mode.Store(mode)
		body := get("/metrics")
		assert.Contains(t, body, `m2hod_info{attach_mode="`+mode+`",mode="enforce",policy="m2ho"} 1`+"\n", mode)
		attached := "1"
		if mode == datapath.AttachNone {
			attached = "0"
		}
		assert.Contains(t, body, "\nm2hod_datapath_attached "+attached+"\n", mode)
		assert.Equal(t, mode, statusMode(), "/status agrees")
	}
}

// TestEveryDatapathCounterExported: /metrics has one
// m2hod_datapath_events_total series per entry of the counter enum, with
// its value, and /status the same counters by the same names; the RTT
// histogram has the datapath's buckets.
func TestEveryDatapathCounterExported(t *testing.T) {
	dp := newFakeDatapath()
	for id := range dp.counters {
		dp.counters[id] = uint64(1000 + id)
	}
	d, err := open(testConfig(t), nil, opener{
		datapath: func(datapath.Options) (datapathAPI, error) { return dp, nil },
		source: func(string, diagsrc.Options) (diag.Source, error) {
			return &chanSource{events: make(chan diag.Event)}, nil
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	get := func(path string) string {
		rec := httptest.NewRecorder()
		d.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, rec.Code, path)
		return rec.Body.String()
	}
	body := get("/metrics")
	var st struct {
		Datapath struct {
			Counters map[string]uint64 `json:"counters"`
		} `json:"datapath"`
	}
	require.NoError(t, json.Unmarshal([]byte(get("/status")), &st))
	assert.Len(t, st.Datapath.Counters, len(dp.counters))
	for id, v := range dp.counters {
		name := datapath.CounterName(id)
		assert.Contains(t, body, fmt.Sprintf("m2hod_datapath_events_total{event=%q} %d\n", name, v))
		assert.Equal(t, v, st.Datapath.Counters[name], name)
	}
	assert.Equal(t, len(dp.counters), strings.Count(body, "m2hod_datapath_events_total{"), "no other series")
	// bucket i of the datapath ends at 2^(i+1) us; the last is +Inf's
	_, upper := datapath.RTTBucketBounds(0)
	assert.Contains(t, body, fmt.Sprintf("m2hod_rtt_seconds_bucket{le=\"%g\"}", upper.Seconds()))
	assert.Equal(t, datapath.RTTBuckets, strings.Count(body, "m2hod_rtt_seconds_bucket{"), "one per datapath bucket, the last as +Inf")
}
