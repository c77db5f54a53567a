// Package gendoc replaces the generated section of a document, so that a figure in a README comes from the
// record a generator read and a test can tell when someone edited it by hand.
package gendoc

import (
	"bytes"
	"fmt"
)

// Splice returns doc with the text between the lines begin and end replaced by body (which ends with a
// newline); the marker lines stay.
func Splice(doc []byte, begin, end, body string) ([]byte, error) {
	b := bytes.Index(doc, []byte(begin))
	e := bytes.Index(doc, []byte(end))
	if b < 0 || e < b {
		return nil, fmt.Errorf("no generated section (%q … %q)", begin, end)
	}
	var out bytes.Buffer
	out.Write(doc[:b+len(begin)])
	out.WriteString("\n")
	out.WriteString(body)
	out.Write(doc[e:])
	return out.Bytes(), nil
}
