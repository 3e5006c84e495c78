package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/envelope"
)

func note(id, family, member int64) Notification {
	kind := envelope.SubCustomerBlocked
	if member == 0 {
		kind = envelope.SubThresholdAlert
	}
	return Notification{ID: id, EventID: fmt.Sprint("ntf_", id), FamilyID: family, MemberID: member, Kind: kind}
}

func ids(ms []Message) []int64 {
	var out []int64
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func TestHubFiltering(t *testing.T) {
	hub, err := NewHub()
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := hub.Subscribe(100, Filter{MemberID: 1, Role: RoleOwner})
	child, _ := hub.Subscribe(100, Filter{MemberID: 3, Role: RoleMember})
	other, _ := hub.Subscribe(200, Filter{Role: RoleAdmin})
	if hub.Subscribers(100) != 2 || hub.Subscribers(0) != 3 {
		t.Errorf("subscribers = %d, %d", hub.Subscribers(100), hub.Subscribers(0))
	}
	for _, n := range []Notification{note(1, 100, 0), note(2, 100, 3), note(3, 100, 4), note(4, 200, 9)} {
		hub.Publish(n)
	}
	if diff := cmp.Diff([]int64{1, 2, 3}, ids(drainSub(owner))); diff != "" {
		t.Errorf("owner (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{1, 2}, ids(drainSub(child))); diff != "" {
		t.Errorf("member (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{4}, ids(drainSub(other))); diff != "" {
		t.Errorf("other family (-want +got):\n%s", diff)
	}
	child.Close()
	child.Close() // idempotent
	if _, ok := <-child.C; ok || child.Err() != nil {
		t.Errorf("after Close: open or err %v", child.Err())
	}
	if err := hub.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-owner.C; ok || !errors.Is(owner.Err(), ErrClosed) {
		t.Errorf("owner after hub Close: %v", owner.Err())
	}
	if _, err := hub.Subscribe(100, Filter{MemberID: 1, Role: RoleOwner}); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe after Close: %v", err)
	}
	if hub.Publish(note(5, 100, 0)) != 0 {
		t.Error("Publish after Close delivered")
	}
}

func TestHubSlowSubscriberDropped(t *testing.T) {
	var drops []DropInfo
	var pubs []PublishInfo
	hub, err := NewHub(WithBuffer(2), WithHubHooks(HubHooks{
		OnDrop:    func(d DropInfo) { drops = append(drops, d) },
		OnPublish: func(p PublishInfo) { pubs = append(pubs, p) },
	}))
	if err != nil {
		t.Fatal(err)
	}
	slow, _ := hub.Subscribe(100, Filter{MemberID: 1, Role: RoleOwner})
	fast, _ := hub.Subscribe(100, Filter{MemberID: 2, Role: RoleMember})
	var fastGot []int64
	for i := int64(1); i <= 5; i++ {
		hub.Publish(note(i, 100, 0))
		for _, m := range drainSub(fast) { // keeps up
			fastGot = append(fastGot, m.ID)
		}
	}
	if diff := cmp.Diff([]int64{1, 2, 3, 4, 5}, fastGot); diff != "" {
		t.Errorf("fast subscriber (-want +got):\n%s", diff)
	}
	// The slow one keeps what was buffered, then sees its channel closed.
	if diff := cmp.Diff([]int64{1, 2}, ids(drainSub(slow))); diff != "" {
		t.Errorf("slow subscriber (-want +got):\n%s", diff)
	}
	if !errors.Is(slow.Err(), ErrSlowSubscriber) {
		t.Errorf("slow Err = %v", slow.Err())
	}
	if diff := cmp.Diff([]DropInfo{{FamilyID: 100, Filter: Filter{MemberID: 1, Role: RoleOwner}, Reason: ErrSlowSubscriber}}, drops,
		cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) })); diff != "" {
		t.Errorf("drops (-want +got):\n%s", diff)
	}
	if pubs[2] != (PublishInfo{FamilyID: 100, Delivered: 1, Dropped: 1}) {
		t.Errorf("third publish = %+v", pubs[2])
	}
	if hub.Subscribers(100) != 1 {
		t.Errorf("subscribers = %d", hub.Subscribers(100))
	}
}

func TestHubCloseWaitsForReaders(t *testing.T) {
	hub, _ := NewHub()
	sub, _ := hub.Subscribe(1, Filter{Role: RoleOwner})
	hub.Publish(note(1, 1, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := hub.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with an unread message: %v", err)
	}
	drainSub(sub)
	if err := hub.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestHubInvalid(t *testing.T) {
	if _, err := NewHub(WithBuffer(0)); !errors.Is(err, ErrInvalid) {
		t.Errorf("buffer 0: %v", err)
	}
	hub, _ := NewHub()
	for _, c := range []struct {
		fam int64
		f   Filter
	}{{0, Filter{Role: RoleOwner}}, {1, Filter{Role: RoleMember}}, {1, Filter{Role: "KID"}}, {1, Filter{MemberID: -1, Role: RoleOwner}}} {
		if _, err := hub.Subscribe(c.fam, c.f); !errors.Is(err, ErrInvalid) {
			t.Errorf("Subscribe(%d, %+v): %v", c.fam, c.f, err)
		}
	}
}

func TestMessageWriteTo(t *testing.T) {
	var b bytes.Buffer
	m := Message{ID: 12, Event: EventName, Data: Notification{ID: 12, EventID: "ntf_1", FamilyID: 100, Kind: envelope.SubThresholdAlert,
		Title: "t", Body: "줄\n바꿈", Payload: []byte(`{"familyId":100}`), CreatedAt: t0}}
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	want := "id: 12\nevent: notification\ndata: {\"id\":12,\"eventId\":\"ntf_1\",\"familyId\":100,\"kind\":\"THRESHOLD_ALERT\",\"title\":\"t\",\"body\":\"줄\\n바꿈\",\"payload\":{\"familyId\":100},\"createdAt\":\"2026-02-06T14:30:00Z\"}\n\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("frame (-want +got):\n%s", diff)
	}
	b.Reset()
	if _, err := (Message{Data: Notification{Payload: []byte("{")}}).WriteTo(&b); err == nil {
		t.Error("bad payload JSON encoded")
	}
}

// Property: every subscriber receives, in order, exactly the notifications
// of its family it may see; with a small buffer, a subscriber that is not
// read gets a prefix of that and is dropped with ErrSlowSubscriber exactly
// when the prefix is shorter than what it should have seen.
func TestHubFanOutProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		buffer := rapid.IntRange(1, 8).Draw(t, "buffer")
		hub, err := NewHub(WithBuffer(buffer))
		if err != nil {
			t.Fatal(err)
		}
		type subscriber struct {
			fam int64
			f   Filter
			s   *Subscription
		}
		var subs []subscriber
		for i := range rapid.IntRange(1, 6).Draw(t, "subs") {
			fam := rapid.Int64Range(1, 2).Draw(t, fmt.Sprint("fam", i))
			f := Filter{MemberID: rapid.Int64Range(1, 3).Draw(t, fmt.Sprint("member", i)),
				Role: rapid.SampledFrom([]Role{RoleOwner, RoleMember, RoleAdmin}).Draw(t, fmt.Sprint("role", i))}
			s, err := hub.Subscribe(fam, f)
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, subscriber{fam, f, s})
		}
		var sent []Notification
		for i := range rapid.IntRange(0, 20).Draw(t, "notes") {
			n := note(int64(i+1), rapid.Int64Range(1, 2).Draw(t, fmt.Sprint("nfam", i)), rapid.Int64Range(0, 3).Draw(t, fmt.Sprint("nmem", i)))
			sent = append(sent, n)
			hub.Publish(n)
		}
		for i, s := range subs {
			var want []int64
			for _, n := range sent {
				if n.FamilyID == s.fam && s.f.Sees(n) {
					want = append(want, n.ID)
				}
			}
			got := ids(drainSub(s.s))
			if len(want) > buffer {
				if !errors.Is(s.s.Err(), ErrSlowSubscriber) || !cmp.Equal(want[:buffer], got) {
					t.Fatalf("sub %d (%+v): got %v err %v, want prefix of %v", i, s.f, got, s.s.Err(), want)
				}
				continue
			}
			if s.s.Err() != nil || !cmp.Equal(want, got) {
				t.Fatalf("sub %d (%+v): got %v err %v, want %v", i, s.f, got, s.s.Err(), want)
			}
		}
	})
}
