package policy_test

import (
	"fmt"
	"time"

	"github.com/dabom/dpcs/policy"
)

func ExampleEvaluate() {
	c, err := policy.ParseConstraints(map[string]string{
		"BLOCK:TIME:START":   "2200",
		"BLOCK:TIME:END":     "0700",
		"LIMIT:DATA:MONTHLY": "536870912", // 500 MB
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	zone, _ := policy.LoadZone("Asia/Seoul")
	pool := policy.Pool{Provisioned: true, Total: 10 << 30, Used: 4 << 30}
	member := policy.Member{Member: true, MonthlyUsed: 400 << 20}
	for _, at := range []string{"2026-02-06T12:59:00Z", "2026-02-06T13:00:00Z"} { // 21:59 and 22:00 KST
		t, _ := time.Parse(time.RFC3339, at)
		r := policy.Evaluate(c, member, pool, policy.Request{Bytes: 5 << 20, AppID: "com.youtube.app", At: policy.MomentOf(t, zone)})
		fmt.Printf("%s rule=%q\n", r.Decision, r.Rule)
	}
	r := policy.Evaluate(c, member, pool, policy.Request{Bytes: 200 << 20, At: policy.Moment{Minute: 12 * 60, Weekday: 1}})
	fmt.Println(r.Decision, r.Rule)
	// Output:
	// ALLOWED rule=""
	// BLOCKED_TIME rule="BLOCK:TIME:START"
	// BLOCKED_LIMIT_MONTHLY LIMIT:DATA:MONTHLY
}

func ExampleParseConstraints() {
	_, err := policy.ParseConstraints(map[string]string{"LIMIT:DATA:DAILY": "-1", "BLOCK:TIME:night": "22:00-07:00"})
	fmt.Println(err)
	// Output:
	// BLOCK:TIME:night: must be HHMM (0000-2359), got "22:00"
	// LIMIT:DATA:DAILY: must be ≥ 0, got -1
}

func ExampleTemplate_Apply() {
	tpl := policy.Template{ID: 1, Name: "School nights", Type: "TIME_BLOCK", RequireRole: policy.RoleMember, Active: true,
		DefaultRules: map[string]string{"BLOCK:TIME:school": "2200-0700@SUN-THU"}}
	a, err := tpl.Apply(12345, policy.RoleMember)
	fmt.Println(a.Rules, err)
	// Output:
	// map[BLOCK:TIME:school:2200-0700@SUN-THU] <nil>
}
