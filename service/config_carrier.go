package service

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/store"
)

// ByteSize is an amount of data in a variable: bytes, or a whole number of
// MB or GB (binary units, as the top-up offers are written): 500MB, 1GB.
type ByteSize int64

// Decode reads a ByteSize (envconfig.Decoder).
func (b *ByteSize) Decode(s string) error {
	s = strings.TrimSpace(s)
	unit := int64(1)
	switch {
	case strings.HasSuffix(s, "GB"):
		unit, s = 1<<30, strings.TrimSuffix(s, "GB")
	case strings.HasSuffix(s, "MB"):
		unit, s = 1<<20, strings.TrimSuffix(s, "MB")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > policy.MaxBytes/unit {
		return fmt.Errorf("want bytes, or a whole number of MB or GB (e.g. 500MB, 1GB), at most %d bytes", policy.MaxBytes)
	}
	*b = ByteSize(n * unit)
	return nil
}

// GiftConfig is DPCS_GIFT_*: the carriers' rules every gift keeps
// (store.GiftRules; the defaults are the figures T world, KT and LG U+
// publish) and how often one member may try.
type GiftConfig struct {
	GivenPerMonth    int        `envconfig:"GIVEN_PER_MONTH" default:"2" deployables:"server, all-in-one" desc:"gifts one member may give a month (0: no limit)"`
	ReceivedPerMonth int        `envconfig:"RECEIVED_PER_MONTH" default:"2" deployables:"server, all-in-one" desc:"gifts one member may receive a month (0: no limit)"`
	Step             ByteSize   `envconfig:"STEP" default:"100MB" deployables:"server, all-in-one" desc:"a gift is a whole number of these (bytes, or MB/GB; 0: any amount)"`
	Max              ByteSize   `envconfig:"MAX" default:"1GB" deployables:"server, all-in-one" desc:"the most one gift moves (0: no limit)"`
	GiverFloor       ByteSize   `envconfig:"GIVER_FLOOR" default:"500MB" deployables:"server, all-in-one" desc:"what the giver keeps of its month's allowance after a gift, at least (0: nothing)"`
	MaxShare         int        `envconfig:"MAX_SHARE" default:"50" deployables:"server, all-in-one" desc:"the most a member gives in a month, in percent of its monthly limit (0: no limit)"`
	ReceivedMax      ByteSize   `envconfig:"RECEIVED_MAX" default:"2GB" deployables:"server, all-in-one" desc:"the most one member receives in a month (0: no limit)"`
	MinorsGive       bool       `envconfig:"MINORS_GIVE" default:"false" deployables:"server, all-in-one" desc:"true lets members marked as minors give gifts too; false: they only receive"`
	Rate             limit.Rate `envconfig:"RATE" default:"10/1m" deployables:"server, all-in-one" desc:"gift requests one member may send, written N/duration; over it 429 with Retry-After"`
}

// Rules are the store's form of the rules.
func (g GiftConfig) Rules() store.GiftRules {
	return store.GiftRules{GivenPerMonth: g.GivenPerMonth, ReceivedPerMonth: g.ReceivedPerMonth, Step: int64(g.Step), Max: int64(g.Max),
		GiverFloor: int64(g.GiverFloor), MaxSharePercent: g.MaxShare, ReceivedMax: int64(g.ReceivedMax), MinorsOnlyReceive: !g.MinorsGive}
}

// APIVATRate is VATRate as api.Config takes it (0 there is the default;
// no VAT is negative).
func (c Config) APIVATRate() int {
	if c.VATRate == 0 {
		return -1
	}
	return c.VATRate
}

// checkCarrier checks the carriers' rules' variables.
func (c Config) checkCarrier(r *envRead) []error {
	var errs []error
	r.want(&errs, "DPCS_VAT_RATE", c.VATRate >= 0 && c.VATRate <= 100, "a percentage from 0 to 100")
	g := c.Gift
	r.want(&errs, "DPCS_GIFT_GIVEN_PER_MONTH", g.GivenPerMonth >= 0 && g.GivenPerMonth <= 1000, "a whole number from 0 to 1000")
	r.want(&errs, "DPCS_GIFT_RECEIVED_PER_MONTH", g.ReceivedPerMonth >= 0 && g.ReceivedPerMonth <= 1000, "a whole number from 0 to 1000")
	r.want(&errs, "DPCS_GIFT_MAX_SHARE", g.MaxShare >= 0 && g.MaxShare <= 100, "a percentage from 0 to 100")
	r.want(&errs, "DPCS_GIFT_MAX", g.Step == 0 || g.Max == 0 || g.Max >= g.Step, "at least DPCS_GIFT_STEP")
	if err := g.Rules().Check(); err != nil && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("DPCS_GIFT_*: %w", err))
	}
	return errs
}
