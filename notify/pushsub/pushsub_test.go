package pushsub_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/dabom/dpcs/notify/pushsub"
)

// A refused subscription names the field at fault (the store's problem
// details name it); notify's TestValidatePushSubscription covers the rules.
func TestValidateNamesTheField(t *testing.T) {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p256 := base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes())
	auth := base64.RawURLEncoding.EncodeToString(make([]byte, 16))
	for _, tc := range []struct {
		s     pushsub.Subscription
		field string
	}{
		{pushsub.Subscription{Endpoint: "https://push.example/x", P256dh: p256, Auth: auth}, ""},
		{pushsub.Subscription{Endpoint: "ftp://push.example/x", P256dh: p256, Auth: auth}, "endpoint"},
		{pushsub.Subscription{Endpoint: "https://10.0.0.1/x", P256dh: p256, Auth: auth}, "endpoint"},
		{pushsub.Subscription{Endpoint: "https://push.example/x", P256dh: p256[:40], Auth: auth}, "keys.p256dh"},
		{pushsub.Subscription{Endpoint: "https://push.example/x", P256dh: p256, Auth: auth[:10]}, "keys.auth"},
	} {
		err := pushsub.Validate(tc.s, false)
		var bad *pushsub.Error
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s refused: %v", tc.s.Endpoint, err)
		case tc.field != "" && (!errors.As(err, &bad) || bad.Field != tc.field):
			t.Errorf("%+v: %v, want an *Error on %s", tc.s, err, tc.field)
		}
	}
}
