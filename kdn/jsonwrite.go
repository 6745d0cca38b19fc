package kdn

import (
	"strconv"
	"time"

	"github.com/kvca/kvca/internal/kdnid"
)

// jw writes compact JSON in the exact byte form the reference emits
// (pydantic model_dump_json): no whitespace, raw UTF-8, only '"', '\\' and
// control characters escaped. The same escaping is Python's
// json.dumps(ensure_ascii=False); strings are written by kdnid.AppendJSONString,
// which the canonical ids (§1.4) share.
type jw struct {
	b     []byte
	first []bool // per open container: no element written yet
}

func (w *jw) open(c byte) {
	w.sep()
	w.b = append(w.b, c)
	w.first = append(w.first, true)
}

func (w *jw) close(c byte) {
	w.first = w.first[:len(w.first)-1]
	w.b = append(w.b, c)
}

// sep writes the comma before an array element; object values are preceded
// by key(), which already handled it.
func (w *jw) sep() {
	n := len(w.first)
	if n == 0 {
		return
	}
	if w.first[n-1] {
		w.first[n-1] = false
		return
	}
	if w.b[len(w.b)-1] != ':' {
		w.b = append(w.b, ',')
	}
}

func (w *jw) objStart() { w.open('{') }
func (w *jw) objEnd()   { w.close('}') }
func (w *jw) arrStart() { w.open('[') }
func (w *jw) arrEnd()   { w.close(']') }

func (w *jw) key(k string) {
	w.sep()
	w.b = kdnid.AppendJSONString(w.b, k)
	w.b = append(w.b, ':')
}

func (w *jw) str(s string) {
	w.sep()
	w.b = kdnid.AppendJSONString(w.b, s)
}

func (w *jw) null() {
	w.sep()
	w.b = append(w.b, "null"...)
}

func (w *jw) int(n int64) {
	w.sep()
	w.b = strconv.AppendInt(w.b, n, 10)
}

func (w *jw) bool(v bool) {
	w.sep()
	w.b = strconv.AppendBool(w.b, v)
}

func (w *jw) time(t time.Time) { w.str(formatDatetime(t)) }

func (w *jw) optStr(o Opt[string]) {
	if v, ok := o.Get(); ok {
		w.str(v)
	} else {
		w.null()
	}
}

func (w *jw) optInt(o Opt[int64]) {
	if v, ok := o.Get(); ok {
		w.int(v)
	} else {
		w.null()
	}
}

func (w *jw) optBool(o Opt[bool]) {
	if v, ok := o.Get(); ok {
		w.bool(v)
	} else {
		w.null()
	}
}

func (w *jw) optTime(o Opt[time.Time]) {
	if v, ok := o.Get(); ok {
		w.time(v)
	} else {
		w.null()
	}
}

func (w *jw) strs(list []string) {
	w.arrStart()
	for _, s := range list {
		w.str(s)
	}
	w.arrEnd()
}

// optObj writes a nullable nested model.
func optObj[T any](w *jw, o Opt[T], write func(T, *jw)) {
	if v, ok := o.Get(); ok {
		write(v, w)
	} else {
		w.null()
	}
}
