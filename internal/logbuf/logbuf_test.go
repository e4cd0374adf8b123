package logbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				fmt.Fprintf(&b, "writer %d line %d\n", w, i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 400, strings.Count(b.String(), "\n"))
}
