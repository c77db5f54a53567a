package gendoc

import "testing"

func TestSplice(t *testing.T) {
	doc := "intro\n<!-- b -->\nold\nlines\n<!-- e -->\nrest\n"
	got, err := Splice([]byte(doc), "<!-- b -->", "<!-- e -->", "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n<!-- b -->\nnew\n<!-- e -->\nrest\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"no markers", "<!-- e -->\n<!-- b -->\n", "<!-- b -->\n"} {
		if _, err := Splice([]byte(bad), "<!-- b -->", "<!-- e -->", "x\n"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
