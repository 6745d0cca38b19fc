package edge

import (
	"strings"
	"testing"
)

func TestBackendListKeepsModelSuffixes(t *testing.T) {
	got := backendList([]string{"http://a:1#m1", "m2", "http://b:2", "http://c:3#x", "y,z", "http://d:4,http://e:5#q"})
	want := []string{"http://a:1#m1,m2", "http://b:2", "http://c:3#x,y,z", "http://d:4", "http://e:5#q"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
