package epp

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// subsetHint reads the subset hint of a request's filter metadata. ok
// is false when the gateway sets none (pick from the whole pool); an
// empty list with ok true means no endpoint is allowed. The value is a
// list of "ip:port" strings as the protocol shows it, or one string of
// comma-separated endpoints as header-to-metadata filters write it.
func subsetHint(md *corev3.Metadata) (subset []string, ok bool) {
	v := metadataValue(md, SubsetNamespace, SubsetKey)
	if v == nil {
		return nil, false
	}
	subset = []string{}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		subset = appendEndpoints(subset, k.StringValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			subset = appendEndpoints(subset, e.GetStringValue())
		}
	}
	return subset, true
}

// servedEndpoint reads the endpoint that served a response from the
// response's filter metadata; "" when the gateway does not report it.
func servedEndpoint(md *corev3.Metadata) string {
	return metadataValue(md, DestinationNamespace, ServedKey).GetStringValue()
}

func metadataValue(md *corev3.Metadata, namespace, key string) *structpb.Value {
	ns := md.GetFilterMetadata()[namespace]
	if ns == nil {
		return nil
	}
	return ns.GetFields()[key]
}

func appendEndpoints(dst []string, list string) []string {
	for e := range strings.SplitSeq(list, ",") {
		if e = strings.TrimSpace(e); e != "" {
			dst = append(dst, e)
		}
	}
	return dst
}

// withinSubset keeps the endpoints the subset allows, in order. A subset
// entry without a port allows every port of that address, as gateways
// that know pods but not ports write it.
func withinSubset(eps, subset []string) []string {
	out := eps[:0:0]
	for _, e := range eps {
		host := e
		if i := strings.LastIndexByte(e, ':'); i > 0 {
			host = strings.Trim(e[:i], "[]")
		}
		for _, s := range subset {
			if s == e || strings.Trim(s, "[]") == host {
				out = append(out, e)
				break
			}
		}
	}
	return out
}
