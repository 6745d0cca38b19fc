package mock

import (
	"testing"

	"github.com/valyala/fasthttp"
)

func fastCtx(body string) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI(PathChat)
	ctx.Request.SetBodyString(body)
	return &ctx
}

func TestFastModeDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	e := New(Config{Fast: true})
	ctx := fastCtx(chatBody(true, 16, "hello"))
	e.Handler(ctx)
	if allocs := testing.AllocsPerRun(200, func() {
		ctx.Response.Reset()
		e.Handler(ctx)
	}); allocs > 0 {
		t.Fatalf("fast mode allocates %.1f times per request", allocs)
	}
}

func BenchmarkFastHandler(b *testing.B) {
	e := New(Config{Fast: true})
	ctx := fastCtx(chatBody(true, 16, "hello"))
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		e.Handler(ctx)
	}
}

func BenchmarkRenderAndHash(b *testing.B) {
	body := []byte(chatBody(false, 16, "x", "y", "z"))
	var p []byte
	var h []uint64
	b.ReportAllocs()
	for b.Loop() {
		p, _ = Render(p[:0], PathChat, body)
		h = BlockHashes(h[:0], p, 16)
	}
}
