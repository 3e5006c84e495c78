package charging

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/service/store"
)

// A REAUTHORIZATION names each rating group the session holds once, also
// when it holds one on two UPFs (ReauthorizationDetails names no UPF).
func TestReauthNamesEachRatingGroupOnce(t *testing.T) {
	sess := store.ChargingSession{Grants: []store.ChargingGrant{
		{RatingGroup: 10, UPFID: "upf-a"}, {RatingGroup: 20}, {RatingGroup: 10, UPFID: "upf-b"}}}
	var got ChargingNotifyRequest
	if err := json.Unmarshal(reauthBody(sess), &got); err != nil {
		t.Fatal(err)
	}
	var rgs []uint32
	for _, d := range got.ReauthorizationDetails {
		rgs = append(rgs, *d.RatingGroup)
	}
	if got.NotificationType != NotificationReauthorization || !cmp.Equal(rgs, []uint32{10, 20}) {
		t.Errorf("notification = %s %v, want REAUTHORIZATION of 10 and 20", got.NotificationType, rgs)
	}
}
