package qcdiag

// Internals that the external tests check against a reference.
var (
	EmbeddedFrame = embeddedFrame
	EmbeddedStart = embeddedStart
)

// MultiRadioHeaderLen is the length of the 0x98 wrapper.
const MultiRadioHeaderLen = multiRadioHeaderLen
