package envelope

// DecodeSlow is Decode without its fast path: the encoding/json decoder that
// decodeFast must agree with, for the differential tests.
func DecodeSlow(data []byte) (Event, error) { return builtins.decodeSlow(data) }

// EncodeSlow is Encode without its fast path: the encoding/json encoder that
// appendEnvelope must agree with, for the differential tests.
func EncodeSlow[T Payload](e Envelope[T]) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e.marshalSlow()
}
