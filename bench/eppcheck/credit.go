package eppcheck

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// conversationHeader names a check's conversation to a picker that
// cannot read prompts (epptest's fake); a picker reading the body, as
// kvca's does, ignores it.
const conversationHeader = "x-epptest-conversation"

// prefillerHeader is llm-d's request header naming a disaggregated
// request's prefill worker (epp.PrefillerHeader).
const prefillerHeader = "x-prefiller-host-port"

// turnBody is turn n (0-based) of conversation id under a system prompt
// of a few KB that the conversations of one group share (as a fleet's
// users share one assistant's prompt), and the history resent.
func turnBody(group, id string, n int, stream bool) []byte {
	sys := strings.Repeat("Group "+group+" has a system prompt of its own, about the eppcheck shop's returns. ", 40)
	msgs := fmt.Sprintf(`{"role":"system","content":%q}`, sys)
	for i := 0; i <= n; i++ {
		msgs += fmt.Sprintf(`,{"role":"user","content":"question %d of conversation %s, %s"}`, i, id, strings.Repeat("with details ", 30))
		if i < n {
			msgs += fmt.Sprintf(`,{"role":"assistant","content":"answer %d"}`, i)
		}
	}
	return fmt.Appendf(nil, `{"model":"mock","max_tokens":4,"stream":%t,"messages":[%s]}`, stream, msgs)
}

// creditModes are the body modes the served-credit case is played in.
var creditModes = []struct {
	name   string
	mode   bodyMode
	noWait bool
}{
	{"full-duplex", fullDuplex, false},
	{"buffered", buffered, false},
	{"streamed", streamedMode, true},
}

// servedCredit: an answer the gateway served at a fallback endpoint is
// credited there, streamed or not, in every body mode: the
// conversation's next turn is picked there (a picker that credited the
// endpoint it picked would send it back where its prefix is not). Eight
// conversations of a shared system prompt play their first turns, each
// served at a fallback, then their second turns.
func (c *checker) servedCredit() {
	run := fmt.Sprintf("%x", time.Now().UnixNano())
	for _, m := range creditModes {
		for _, stream := range []bool{false, true} {
			kind := "non-streamed"
			if stream {
				kind = "streamed"
			}
			group := fmt.Sprintf("%s-%s-%s", run, m.name, kind)
			c.record(fmt.Sprintf("served credit (%s, %s answers): the next turn is picked at the fallback that served the last", m.name, kind), KVCA,
				c.credit(group, m.mode, m.noWait, stream))
		}
	}
}

func (c *checker) credit(group string, mode bodyMode, noWait, stream bool) error {
	const n = 8
	served := make([]string, n)
	for i := range n {
		id := fmt.Sprint(i)
		_, at, err := c.turn(request{mode: mode, noWait: noWait, chunks: chunksFor(mode, turnBody(group, id, 0, stream)),
			extra: []string{conversationHeader, group + id}}, true)
		if err != nil {
			return fmt.Errorf("conversation %d, first turn: %w", i, err)
		}
		served[i] = at
	}
	wrong := 0
	var first error
	for i := range n {
		id := fmt.Sprint(i)
		p, _, err := c.turn(request{mode: mode, noWait: noWait, chunks: chunksFor(mode, turnBody(group, id, 1, stream)),
			extra: []string{conversationHeader, group + id}}, false)
		if err != nil {
			return fmt.Errorf("conversation %d, second turn: %w", i, err)
		}
		if got := strings.Split(p.header, ",")[0]; got != served[i] {
			wrong++
			if first == nil {
				first = fmt.Errorf("conversation %d: the second turn was picked at %s, the first was served at %s", i, got, served[i])
			}
		}
	}
	if wrong > 0 {
		return fmt.Errorf("%d of %d second turns picked elsewhere than their first was served; %w", wrong, n, first)
	}
	return nil
}

func chunksFor(mode bodyMode, b []byte) [][]byte {
	if mode == buffered {
		return [][]byte{b}
	}
	return split(b, 2)
}

// turn picks a request; with serve set, the gateway "retries" it at a
// fallback (an endpoint of the pool other than the first picked), which
// answers, and reports that endpoint as the one that served.
func (c *checker) turn(q request, serve bool) (*picked, string, error) {
	s, err := c.open()
	if err != nil {
		return nil, "", err
	}
	defer s.close()
	q.path = "/v1/chat/completions"
	p, err := sendRequest(s, q)
	eps, err := c.validPick(p, err)
	if err != nil || !serve {
		return p, "", err
	}
	// As Envoy does: the first fallback the pick names, else any other
	// endpoint of the pool.
	served := ""
	if len(eps) > 1 {
		served = eps[1]
	}
	for _, a := range c.eng.addrs {
		if served == "" && a != eps[0] {
			served = a
		}
	}
	if served == "" {
		return nil, "", fmt.Errorf("no endpoint but %s to serve at", eps[0])
	}
	resp, err := forward(c.ctx, c.http, served, q.path, p.forwarded)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("the fallback %s answered %s", served, resp.Status)
	}
	if _, err := sendResponse(s, q.mode, response{status: "200", served: served, body: resp.Body,
		headers: []string{"content-type", resp.Header.Get("content-type"), "content-length", resp.Header.Get("content-length")}}); err != nil {
		return nil, "", err
	}
	return p, served, closeAndWait(s)
}

// prefillerOf reads the prefill worker a pick names (set with the pick's
// header mutation); removed: the mutation removes a client's own.
func prefillerOf(r *extprocv3.ProcessingResponse) (value string, removed bool) {
	m := commonOf(r).GetHeaderMutation()
	for _, h := range m.GetSetHeaders() {
		if strings.EqualFold(h.GetHeader().GetKey(), prefillerHeader) {
			v := string(h.GetHeader().GetRawValue())
			if v == "" {
				v = h.GetHeader().GetValue()
			}
			return v, false
		}
	}
	for _, k := range m.GetRemoveHeaders() {
		if strings.EqualFold(k, prefillerHeader) {
			return "", true
		}
	}
	return "", false
}

// disaggregation: with prefill workers among the endpoints (Config.Prefill),
// a long request's pick names decode endpoints only and its prefill worker
// in x-prefiller-host-port, in every body mode; without, or for a client's
// own header, no prefill worker the client chose reaches the gateway.
func (c *checker) disaggregation() {
	run := fmt.Sprintf("%x", time.Now().UnixNano())
	if len(c.eng.prefills) > 0 {
		for _, m := range creditModes {
			name := fmt.Sprintf("disaggregation (%s): the pick is decode endpoints, the prefill worker in %s", m.name, prefillerHeader)
			s, err := c.open()
			if err != nil {
				c.record(name, KVCA, err)
				continue
			}
			p, err := sendRequest(s, request{mode: m.mode, noWait: m.noWait, path: "/v1/chat/completions",
				chunks: chunksFor(m.mode, turnBody(run+"-pd-"+m.name, "0", 0, true)), extra: []string{prefillerHeader, "192.0.2.1:9"}})
			eps, err := c.validPick(p, err)
			s.close()
			if err == nil {
				for _, e := range eps {
					if c.eng.prefill(e) {
						err = fmt.Errorf("the prefill worker %s among the picked endpoints %v", e, eps)
					}
				}
			}
			if err == nil && !c.eng.prefill(p.prefiller) {
				err = fmt.Errorf("%s is %q, not one of the prefill workers %v", prefillerHeader, p.prefiller, c.eng.prefills)
			}
			c.record(name, KVCA, err)
		}
		return
	}
	p, err := c.quickPick(nil, prefillerHeader, "192.0.2.1:9")
	_, err = c.validPick(p, err)
	if err == nil && (p.prefiller != "" || !p.prefillerRemoved) {
		err = fmt.Errorf("a client's %s is not removed (set %q)", prefillerHeader, p.prefiller)
	}
	c.record("client header: a client's "+prefillerHeader+" never reaches the gateway's side", KVCA, err)
}
