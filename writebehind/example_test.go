package writebehind_test

import (
	"context"
	"fmt"

	"github.com/dabom/dpcs/writebehind"
)

func Example() {
	w := writebehind.WriterFunc[string](func(_ context.Context, batch []string) error {
		fmt.Println("write", batch)
		return nil
	})
	s, _ := writebehind.New[string](w, writebehind.WithBatchSize(3))
	ctx := context.Background()
	_ = s.Add(ctx, "a", "b", "c", "d") // a full batch is written at once
	_ = s.Flush(ctx)                   // and the rest on Flush, Close or after the interval
	_ = s.Close(ctx)
	// Output:
	// write [a b c]
	// write [d]
}
