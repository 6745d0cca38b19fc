package kdn

import (
	"errors"
	"fmt"
	"io"
)

// MaxMessageBytes bounds what ValidateCLI reads; real messages are a few KB.
const MaxMessageBytes = 8 << 20

// Exit statuses of ValidateCLI.
const (
	ExitValid   = 0
	ExitInvalid = 1
	ExitUsage   = 2
)

// ValidateCLI implements `kvca kdn validate --model NAME`: it reads one
// message from in, writes its canonical JSON to out (no trailing newline, so
// the bytes equal the reference's model_dump_json) and returns ExitValid;
// or writes exactly one line naming the broken rule to errOut and returns
// ExitInvalid. An unknown model name is a usage error (ExitUsage).
func ValidateCLI(model string, in io.Reader, out, errOut io.Writer) int {
	if decoderFor(model) == nil {
		fmt.Fprintf(errOut, "kdn validate: unknown model %s (see `kvca kdn validate --help` for the list)\n", safeToken(model))
		return ExitUsage
	}
	data, err := io.ReadAll(io.LimitReader(in, MaxMessageBytes+1))
	if err != nil {
		fmt.Fprintln(errOut, "kdn validate: cannot read the message from stdin")
		return ExitUsage
	}
	if len(data) > MaxMessageBytes {
		fmt.Fprintf(errOut, "kdn validate: %s: %s\n", model,
			verr(CodeOutOfRange, "", "max_bytes", "message exceeds the size limit").Line())
		return ExitInvalid
	}
	canonical, err := Canonical(model, data)
	if err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) { // Canonical only returns *ValidationError; never print a raw error
			ve = verr(CodeRule, "", "internal", "message could not be validated")
		}
		fmt.Fprintf(errOut, "kdn validate: %s: %s\n", model, ve.Line())
		return ExitInvalid
	}
	if _, err := out.Write(canonical); err != nil {
		fmt.Fprintln(errOut, "kdn validate: cannot write the canonical form")
		return ExitUsage
	}
	return ExitValid
}
