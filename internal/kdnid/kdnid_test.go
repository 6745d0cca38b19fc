package kdnid

import "testing"

func TestEndpoint(t *testing.T) {
	if got, want := Endpoint("mock-node-a"), "endpoint_07283b717d9356a9aad19ba158c1cdbb"; got != want {
		t.Fatalf("Endpoint = %s, want %s", got, want)
	}
}

func TestAppendJSONString(t *testing.T) {
	got := string(AppendJSONString(nil, "a\"b\\c\n\x01é"))
	if want := `"a\"b\\c\n\u0001é"`; got != want {
		t.Fatalf("AppendJSONString = %s, want %s", got, want)
	}
}
