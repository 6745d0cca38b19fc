package edge

import (
	"bufio"
	"bytes"
	"io"
	"strings"
)

// metricHelp documents every family kvca exports: its type and meaning.
// The metrics library writes samples only, so /metrics adds these lines.
var metricHelp = map[string][2]string{
	"kvca_requests_total":                           {"counter", "Requests received, by route and routing phase (bootstrap, followup, fallback; none when not routed)."},
	"kvca_request_duration_seconds":                 {"histogram", "Time from receiving a request to the end of its response, by route."},
	"kvca_upstream_first_byte_seconds":              {"histogram", "Time from receiving a request to the backend's response headers, by backend."},
	"kvca_responses_total":                          {"counter", "Answers by route and status class (2xx, 4xx, 5xx, ...), kvca's own included."},
	"kvca_time_to_first_token_seconds":              {"histogram", "Time from receiving a request to the first body byte of a successful answer (the first SSE event when streamed), by route and model (models as discovered or configured; other for the rest)."},
	"kvca_build_info":                               {"gauge", "Always 1; the labels say kvca's version and the Go version it was built with."},
	"kvca_routed_blocks_total":                      {"counter", "Blocks of routed requests, by whether the chosen backend was believed to hold them (cached) or not (novel)."},
	"kvca_backend_active_requests":                  {"gauge", "Requests in flight on a backend from this replica."},
	"kvca_backend_prefill_blocks":                   {"gauge", "Novel blocks reserved on a backend and not yet answered."},
	"kvca_backend_healthy":                          {"gauge", "1 when a backend receives traffic, 0 when it is ejected or failing its health check."},
	"kvca_backend_role":                             {"gauge", "Always 1; the role label says the backend's part in a disaggregated fleet (prefill, decode, both)."},
	"kvca_pd_requests_total":                        {"counter", "Routed requests of a disaggregated fleet, by how they ran (disaggregated: a prefill leg and a decode leg; aggregated, on a decode worker alone) and, aggregated, why."},
	"kvca_pd_prefill_legs_total":                    {"counter", "Prefill legs by outcome (ok, failed, status, refused, no_transfer, cancelled, detached)."},
	"kvca_pd_prefill_legs_running":                  {"gauge", "Prefill legs in flight."},
	"kvca_pd_prefill_seconds":                       {"histogram", "Duration of prefill legs that served, from sending to the end of their answer."},
	"kvca_pd_decode_first_byte_seconds":             {"histogram", "Time from sending a disaggregated request's decode leg to its answer's first body byte (the KV transfer and the first token)."},
	"kvca_pd_prefill_blocks_total":                  {"counter", "Blocks of prefill legs, by whether the prefill worker was believed to hold them (cached) or not (novel)."},
	"kvca_picker_picks_total":                       {"counter", "Endpoint picker: requests picked, by the rule that chose the endpoint (prefix, cost, least_loaded, ...)."},
	"kvca_picker_streams_total":                     {"counter", "Endpoint picker: ext_proc streams ended, by how (complete, cancelled, answered: kvca answered the request itself, error)."},
	"kvca_picker_messages_total":                    {"counter", "Endpoint picker: ext_proc messages received from the gateway, by kind."},
	"kvca_pool_backends":                            {"gauge", "Backends configured, by role (prefill, decode, both)."},
	"kvca_pool_healthy_backends":                    {"gauge", "Healthy backends, by role."},
	"kvca_pool_active_requests":                     {"gauge", "Requests (and prefill legs) in flight on the backends of a role, from this replica."},
	"kvca_pool_prefill_blocks":                      {"gauge", "Novel blocks reserved on the backends of a role and not yet answered."},
	"kvca_table_blocks":                             {"gauge", "Blocks tracked in the block table."},
	"kvca_table_locations":                          {"gauge", "Backend locations tracked in the block table."},
	"kvca_table_capacity_blocks":                    {"gauge", "The block table's bound (--max-blocks, rounded up per shard)."},
	"kvca_table_evictions_total":                    {"counter", "Blocks or locations removed from the table, by reason (expired, capacity, reset)."},
	"kvca_table_vacuum_runs_total":                  {"counter", "Wake-ups of the deadline-driven vacuum."},
	"kvca_cbr_memo_lookups_total":                   {"counter", "Strings of 256 bytes or more looked up in the CBR memo, by result (hit: compared instead of canonicalised and hashed)."},
	"kvca_cbr_memo_literals":                        {"gauge", "Strings remembered by the CBR memo (--cbr-memo-bytes)."},
	"kvca_cbr_memo_bytes":                           {"gauge", "Approximate memory held by the CBR memo."},
	"kvca_cbr_resume_lookups_total":                 {"counter", "Request bodies looked up in the resumer (--resume-memo-bytes), by result (hit: canonicalised and hashed only from a remembered message boundary)."},
	"kvca_cbr_resume_bytes":                         {"gauge", "Approximate memory held by the resumer."},
	"kvca_cbr_resume_snapshots":                     {"gauge", "Message boundaries the resumer remembers."},
	"kvca_cbr_resume_skipped_bytes_total":           {"counter", "Raw body bytes that resumed requests did not canonicalise again."},
	"kvca_cbr_resume_evictions_total":               {"counter", "Remembered bodies dropped to stay within --resume-memo-bytes."},
	"kvca_upstream_errors_total":                    {"counter", "Upstream failures by backend and kind (connect, timeout, stream, status, busy: every pooled connection in use)."},
	"kvca_client_disconnects_total":                 {"counter", "Responses abandoned by the client before they ended."},
	"kvca_stream_usage_asked_total":                 {"counter", "Streamed chat and completions requests whose body kvca made ask for the answer's usage (--stream-usage)."},
	"kvca_stream_usage_removed_total":               {"counter", "Usage-only events kvca removed from the answers of the streams it asked usage for."},
	"kvca_bad_requests_total":                       {"counter", "Requests refused as invalid, by reason."},
	"kvca_client_connections":                       {"gauge", "Client connections open on the public listener."},
	"kvca_client_connections_refused_total":         {"counter", "Client connections closed at once because --max-client-conns were open."},
	"kvca_io_uring_submits_total":                   {"counter", "io_uring submissions of the event loops' batched writes (0: io_uring off or refused)."},
	"kvca_io_uring_sends_total":                     {"counter", "Writes the event loops sent in io_uring batches."},
	"kvca_accept_errors_total":                      {"counter", "Failed accepts on the public listener (out of descriptors or memory); accepting pauses, backing off."},
	"kvca_tls_handshake_errors_total":               {"counter", "Client TLS handshakes that failed or timed out."},
	"kvca_tls_certificate_reloads_total":            {"counter", "Certificate pairs put into service, by listener."},
	"kvca_tls_certificate_reload_errors_total":      {"counter", "Certificate reloads refused (unreadable, invalid or expired pair), by listener; the previous pair stays in service."},
	"kvca_tls_certificate_expiry_timestamp_seconds": {"gauge", "Expiry (Unix time) of the certificate in service, by listener."},
}

// familyOf maps a sample line to its documented family ("" if none).
func familyOf(line string) string {
	end := strings.IndexAny(line, "{ ")
	if end < 0 {
		return ""
	}
	name := line[:end]
	if _, ok := metricHelp[name]; ok {
		return name
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if _, ok := metricHelp[base]; ok {
				return base
			}
		}
	}
	return ""
}

// writeWithHelp copies Prometheus text from src to w, putting HELP and TYPE
// lines before the first sample of each documented family.
func writeWithHelp(w io.Writer, src []byte) {
	bw := bufio.NewWriter(w)
	done := map[string]bool{}
	for len(src) > 0 {
		i := bytes.IndexByte(src, '\n')
		if i < 0 {
			i = len(src) - 1
		}
		line := src[:i+1]
		src = src[i+1:]
		if f := familyOf(string(line)); f != "" && !done[f] {
			done[f] = true
			h := metricHelp[f]
			bw.WriteString("# HELP " + f + " " + h[1] + "\n# TYPE " + f + " " + h[0] + "\n")
		}
		bw.Write(line)
	}
	bw.Flush()
}
