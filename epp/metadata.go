package epp

import (
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protowire"
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

// metadataFields are what the picker reads of a message's metadata
// context, read from its wire form: the subset hint and the endpoint
// served, as subsetHint and servedEndpoint read them from protobuf's
// decoding, which built maps of maps for two strings.
type metadataFields struct {
	subset    []string
	hasSubset bool
	served    string
}

// Field numbers of the metadata the picker reads.
const (
	fMetadataFilter = 1 // Metadata.filter_metadata: entries of key 1, Struct 2
	fValueNull      = 1 // Value.null_value
	fValueNumber    = 2 // Value.number_value (fixed64)
	fValueBool      = 4 // Value.bool_value
	fValueList      = 6 // Value.list_value: ListValue, its values in field 1

	maxMetadataDepth = 64
)

// read reads b, a Metadata; false when it holds anything protobuf's
// decoding would refuse (a string that is not UTF-8, a malformed field,
// nesting too deep) or that this reader does not take (typed metadata,
// unknown fields): protobuf decodes the message then.
func (md *metadataFields) read(b []byte) bool {
	*md = metadataFields{}
	for len(b) > 0 {
		f, ok := nextField(&b)
		if !ok || f.num != fMetadataFilter || f.typ != protowire.BytesType {
			return false
		}
		ns, st, ok := mapEntry(f.v, func(v []byte) bool {
			return eachStructField(v, 0, func(_, _ []byte) bool { return true })
		})
		if !ok {
			return false
		}
		// A map's later entry for a key replaces the earlier.
		switch string(ns) {
		case SubsetNamespace:
			md.subset, md.hasSubset = nil, false
		case DestinationNamespace:
			md.served = ""
		}
		ok = eachStructField(st, 0, func(key, v []byte) bool {
			switch {
			case string(ns) == SubsetNamespace && string(key) == SubsetKey:
				md.subset, md.hasSubset = subsetOf(v), true
			case string(ns) == DestinationNamespace && string(key) == ServedKey:
				md.served = stringOf(v)
			}
			return true
		})
		if !ok {
			return false
		}
	}
	return true
}

// mapEntry splits a map entry of a string key (1) and a message (2),
// valid as valid says; a missing field is empty, a later occurrence
// wins, and every occurrence must be valid, as protobuf decodes each.
func mapEntry(b []byte, valid func(value []byte) bool) (key, value []byte, ok bool) {
	for len(b) > 0 {
		f, ok := nextField(&b)
		if !ok || f.typ != protowire.BytesType || (f.num != 1 && f.num != 2) {
			return nil, nil, false
		}
		if f.num == 1 {
			if !utf8.Valid(f.v) {
				return nil, nil, false
			}
			key = f.v
		} else {
			if !valid(f.v) {
				return nil, nil, false
			}
			value = f.v
		}
	}
	return key, value, true
}

// eachStructField checks a Struct and calls f with each field's key and
// Value; false when the Struct is not one protobuf decodes.
func eachStructField(b []byte, depth int, f func(key, value []byte) bool) bool {
	if depth > maxMetadataDepth {
		return false
	}
	for len(b) > 0 {
		fl, ok := nextField(&b)
		if !ok || fl.num != fStructFields || fl.typ != protowire.BytesType {
			return false
		}
		key, v, ok := mapEntry(fl.v, func(v []byte) bool { return validValue(v, depth+1) })
		if !ok || !f(key, v) {
			return false
		}
	}
	return true
}

// validValue checks a Value as protobuf decodes it.
func validValue(b []byte, depth int) bool {
	if depth > maxMetadataDepth {
		return false
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case (num == fValueNull || num == fValueBool) && typ == protowire.VarintType:
			_, n = protowire.ConsumeVarint(b)
		case num == fValueNumber && typ == protowire.Fixed64Type:
			_, n = protowire.ConsumeFixed64(b)
		case num == fValueString && typ == protowire.BytesType:
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 && !utf8.Valid(v) {
				return false
			}
		case num == fValueStruct && typ == protowire.BytesType:
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 && !eachStructField(v, depth+1, func(_, _ []byte) bool { return true }) {
				return false
			}
		case num == fValueList && typ == protowire.BytesType:
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 && !eachListValue(v, depth+1, func([]byte) {}) {
				return false
			}
		default:
			return false
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// eachListValue checks a ListValue and calls f with each Value.
func eachListValue(b []byte, depth int, f func(v []byte)) bool {
	for len(b) > 0 {
		fl, ok := nextField(&b)
		if !ok || fl.num != 1 || fl.typ != protowire.BytesType || !validValue(fl.v, depth+1) {
			return false
		}
		f(fl.v)
	}
	return true
}

// valueKind is the field of a valid Value's kind that protobuf keeps (the
// last one of the oneof) and its bytes.
func valueKind(b []byte) (protowire.Number, []byte) {
	var num protowire.Number
	var last []byte
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		b = b[k:]
		k = protowire.ConsumeFieldValue(n, typ, b)
		num, last = n, b[:k]
		b = b[k:]
	}
	return num, last
}

// stringOf is a valid Value's string_value, "" for another kind.
func stringOf(v []byte) string {
	num, b := valueKind(v)
	if num != fValueString {
		return ""
	}
	s, _ := protowire.ConsumeBytes(b)
	return string(s)
}

// subsetOf reads the subset hint from a valid Value as subsetHint does:
// a string of comma-separated endpoints, or a list of them.
func subsetOf(v []byte) []string {
	subset := []string{}
	num, b := valueKind(v)
	switch num {
	case fValueString:
		s, _ := protowire.ConsumeBytes(b)
		subset = appendEndpoints(subset, string(s))
	case fValueList:
		list, _ := protowire.ConsumeBytes(b)
		eachListValue(list, 0, func(e []byte) { subset = appendEndpoints(subset, stringOf(e)) })
	}
	return subset
}
