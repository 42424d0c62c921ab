package bench

import (
	"fmt"
	"os"
	"runtime/pprof"
	"testing"
)

func BenchmarkZZ(b *testing.B) {
	direct, gw, bare, key := setup(b)
	l := newLoader(key)
	l.saturate(direct, true, 32, 500)
	l.saturate(gw, true, 32, 500)
	l.saturate(bare, true, 32, 500)
	f, _ := os.Create("/tmp/zz.prof")
	pprof.StartCPUProfile(f)
	res := l.fixedRate([]string{direct, gw, bare}, os.Getenv("ZZJSON") == "", 1000, 6000)
	pprof.StopCPUProfile()
	f.Close()
	for i, r := range res {
		fmt.Println(i, r.pct(0.5), r.pct(0.9), r.pct(0.99))
	}
}
