// Package charging is DPCS as a 5G charging function (CHF): the
// Nchf_ConvergedCharging v3 service an SMF calls to be granted data per PDU
// session and rating group, to report what was used and to release what is
// left (doc/wire-format.md, "Charging (Nchf)"; doc/runbook.md, "Charging").
//
//	svc, err := charging.New(door, st,            // a Charger (the door) and the SQL store
//		charging.WithRatingGroups(groups),          // rating group → app category or app
//		charging.WithGrantSizes(1<<20, 10<<20, 100<<20))
//	defer svc.Close(ctx)
//	srv := charging.NewServer(charging.Handler(svc, charging.HandlerConfig{Tokens: tokens}), nil, log)
//	go srv.Serve(ln)                              // HTTP/1.1 and HTTP/2 cleartext
//	…
//	svc.Reauthorize(ctx, familyID, memberID)      // after a family change: REAUTHORIZATION to live sessions
//
// A session (a charging data resource, its ChargingDataRef) maps its
// subscriber to a family member — by the IMSI an operator set on the member,
// or by the MSISDN, the member's phone — and each rating group to what it
// covers (RatingGroups). Each invocation of a session takes one grant step
// per rating group through the Charger, the consumer-owned interface the
// door implements: the step's id derives from the ChargingDataRef, the
// rating group and the invocationSequenceNumber (StepID), so a retry of an
// invocation takes the same steps, which the Charger answers from its
// record, and the session answers with the answer it stored. The session
// and its last answer are kept in SQL (store.ChargingSession): every process
// serving the routes answers a retry alike.
//
// A session the SMF stops updating is closed by the sweep once its longest
// validityTime and the quotaHoldingTime have passed; its reservations are
// released. What such a lost session can cost at most is in
// doc/runbook.md, "Charging".
package charging
