package charging

import (
	"encoding/json"
	"time"
)

// The Nchf_ConvergedCharging (v3) shapes DPCS reads and writes, with the
// field names and types of their OpenAPI schemas (doc/wire-format.md,
// "Charging (Nchf)"; testdata/nchf-schemas.json holds the schemas the golden
// files are checked against). Attributes DPCS does not use are accepted and
// ignored, as TS 29.501 asks of a receiver: a field this file does not type
// is skipped by the decoder; one it types must have its schema's type.
// Optional scalars are pointers where absence differs from zero.

// ChargingDataRequest is the body of create, update and release.
type ChargingDataRequest struct {
	// SubscriberIdentifier is the SUPI ("imsi-<digits>") or, as DPCS also
	// accepts, the GPSI ("msisdn-<digits>"). Required on create.
	SubscriberIdentifier     string            `json:"subscriberIdentifier,omitempty"`
	TenantIdentifier         string            `json:"tenantIdentifier,omitempty"`
	ChargingID               *uint32           `json:"chargingId,omitempty"`
	MnSConsumerIdentifier    string            `json:"mnSConsumerIdentifier,omitempty"`
	NfConsumerIdentification *NFIdentification `json:"nfConsumerIdentification,omitempty"`
	InvocationTimeStamp      *time.Time        `json:"invocationTimeStamp,omitempty"`
	InvocationSequenceNumber *uint32           `json:"invocationSequenceNumber,omitempty"`
	RetransmissionIndicator  bool              `json:"retransmissionIndicator,omitempty"`
	OneTimeEvent             bool              `json:"oneTimeEvent,omitempty"`
	OneTimeEventType         string            `json:"oneTimeEventType,omitempty"`
	// NotifyURI receives ChargingNotifyRequest (REAUTHORIZATION) for the
	// session.
	NotifyURI                     string                         `json:"notifyUri,omitempty"`
	SupportedFeatures             string                         `json:"supportedFeatures,omitempty"`
	ServiceSpecificationInfo      string                         `json:"serviceSpecificationInfo,omitempty"`
	MultipleUnitUsage             []MultipleUnitUsage            `json:"multipleUnitUsage,omitempty"`
	Triggers                      []Trigger                      `json:"triggers,omitempty"`
	PDUSessionChargingInformation *PDUSessionChargingInformation `json:"pDUSessionChargingInformation,omitempty"`
}

// NFIdentification names the NF consumer (the SMF).
type NFIdentification struct {
	NFName            string          `json:"nFName,omitempty"` // its NF instance id (a UUID)
	NFIPv4Address     string          `json:"nFIPv4Address,omitempty"`
	NFIPv6Address     string          `json:"nFIPv6Address,omitempty"`
	NFPLMNID          json.RawMessage `json:"nFPLMNID,omitempty"`
	NodeFunctionality string          `json:"nodeFunctionality,omitempty"` // SMF, PGW_C_SMF, …; required
	NFFqdn            string          `json:"nFFqdn,omitempty"`
}

// MultipleUnitUsage is one rating group's part of a request: what was used
// since the last report and what is asked for next.
type MultipleUnitUsage struct {
	RatingGroup          *uint32             `json:"ratingGroup,omitempty"` // required
	RequestedUnit        *RequestedUnit      `json:"requestedUnit,omitempty"`
	UsedUnitContainer    []UsedUnitContainer `json:"usedUnitContainer,omitempty"`
	UPFID                string              `json:"uPFID,omitempty"`
	MultihomedPDUAddress json.RawMessage     `json:"multihomedPDUAddress,omitempty"`
}

// RequestedUnit asks for units; an empty one leaves the amount to the CHF.
type RequestedUnit struct {
	Time                 *uint32 `json:"time,omitempty"`
	TotalVolume          *uint64 `json:"totalVolume,omitempty"`
	UplinkVolume         *uint64 `json:"uplinkVolume,omitempty"`
	DownlinkVolume       *uint64 `json:"downlinkVolume,omitempty"`
	ServiceSpecificUnits *uint64 `json:"serviceSpecificUnits,omitempty"`
}

// UsedUnitContainer reports units used.
type UsedUnitContainer struct {
	ServiceID                *uint32         `json:"serviceId,omitempty"`
	QuotaManagementIndicator string          `json:"quotaManagementIndicator,omitempty"`
	Triggers                 []Trigger       `json:"triggers,omitempty"`
	TriggerTimestamp         *time.Time      `json:"triggerTimestamp,omitempty"`
	Time                     *uint32         `json:"time,omitempty"`
	TotalVolume              *uint64         `json:"totalVolume,omitempty"`
	UplinkVolume             *uint64         `json:"uplinkVolume,omitempty"`
	DownlinkVolume           *uint64         `json:"downlinkVolume,omitempty"`
	ServiceSpecificUnits     *uint64         `json:"serviceSpecificUnits,omitempty"`
	EventTimeStamps          []time.Time     `json:"eventTimeStamps,omitempty"`
	LocalSequenceNumber      *int64          `json:"localSequenceNumber,omitempty"` // required
	PDUContainerInformation  json.RawMessage `json:"pDUContainerInformation,omitempty"`
}

// Trigger is a reporting trigger (in requests: what made the SMF report; in
// answers: what the CHF arms).
type Trigger struct {
	TriggerType      string     `json:"triggerType,omitempty"`
	TriggerCategory  string     `json:"triggerCategory"` // IMMEDIATE_REPORT or DEFERRED_REPORT
	TimeLimit        *int64     `json:"timeLimit,omitempty"`
	VolumeLimit      *uint32    `json:"volumeLimit,omitempty"`
	VolumeLimit64    *uint64    `json:"volumeLimit64,omitempty"`
	EventLimit       *uint32    `json:"eventLimit,omitempty"`
	MaxNumberOfccc   *uint32    `json:"maxNumberOfccc,omitempty"`
	TariffTimeChange *time.Time `json:"tariffTimeChange,omitempty"`
}

// PDUSessionChargingInformation describes the PDU session. DPCS reads the
// charging ids (a create's retry is recognised by them), the served GPSI
// (the subscriber's MSISDN when the SUPI is an IMSI DPCS does not know) and
// the PDU session id; the other attributes are accepted as sent.
type PDUSessionChargingInformation struct {
	ChargingID                *uint32                `json:"chargingId,omitempty"`
	SMFChargingID             string                 `json:"sMFchargingId,omitempty"`
	HomeProvidedChargingID    *uint32                `json:"homeProvidedChargingId,omitempty"`
	SMFHomeProvidedChargingID string                 `json:"sMFHomeProvidedChargingId,omitempty"`
	UserInformation           *UserInformation       `json:"userInformation,omitempty"`
	UserLocationinfo          json.RawMessage        `json:"userLocationinfo,omitempty"`
	UETimeZone                string                 `json:"uetimeZone,omitempty"`
	PDUSessionInformation     *PDUSessionInformation `json:"pduSessionInformation,omitempty"`
	UnitCountInactivityTimer  *int64                 `json:"unitCountInactivityTimer,omitempty"`
}

// UserInformation names the served user.
type UserInformation struct {
	ServedGPSI          string `json:"servedGPSI,omitempty"` // msisdn-<digits>
	ServedPEI           string `json:"servedPEI,omitempty"`
	UnauthenticatedFlag bool   `json:"unauthenticatedFlag,omitempty"`
	RoamerInOut         string `json:"roamerInOut,omitempty"`
}

// PDUSessionInformation describes the PDU session itself.
type PDUSessionInformation struct {
	NetworkSlicingInfo    json.RawMessage `json:"networkSlicingInfo,omitempty"`
	PDUSessionID          *uint8          `json:"pduSessionID,omitempty"`
	PDUType               string          `json:"pduType,omitempty"`
	SSCMode               string          `json:"sscMode,omitempty"`
	HPlmnID               json.RawMessage `json:"hPlmnId,omitempty"`
	RATType               string          `json:"ratType,omitempty"`
	DNNID                 string          `json:"dnnId,omitempty"`
	ChargingCharacterists string          `json:"chargingCharacteristics,omitempty"`
	StartTime             *time.Time      `json:"startTime,omitempty"`
	StopTime              *time.Time      `json:"stopTime,omitempty"`
	SessionStopIndicator  bool            `json:"sessionStopIndicator,omitempty"`
	PDUAddress            json.RawMessage `json:"pduAddress,omitempty"`
	AuthorizedSessionAMBR json.RawMessage `json:"authorizedSessionAMBR,omitempty"`
}

// ChargingDataResponse answers create (201) and update (200).
type ChargingDataResponse struct {
	InvocationTimeStamp      time.Time                 `json:"invocationTimeStamp"`
	InvocationSequenceNumber uint32                    `json:"invocationSequenceNumber"`
	InvocationResult         *InvocationResult         `json:"invocationResult,omitempty"`
	SessionFailover          string                    `json:"sessionFailover,omitempty"`
	SupportedFeatures        string                    `json:"supportedFeatures,omitempty"`
	MultipleUnitInformation  []MultipleUnitInformation `json:"multipleUnitInformation,omitempty"`
	Triggers                 []Trigger                 `json:"triggers,omitempty"`
}

// InvocationResult carries an error and what the consumer should do.
type InvocationResult struct {
	Error           *ProblemDetails `json:"error,omitempty"`
	FailureHandling string          `json:"failureHandling,omitempty"` // TERMINATE, CONTINUE, RETRY_AND_TERMINATE
}

// MultipleUnitInformation answers one rating group.
type MultipleUnitInformation struct {
	ResultCode  string       `json:"resultCode,omitempty"`
	RatingGroup uint32       `json:"ratingGroup"`
	GrantedUnit *GrantedUnit `json:"grantedUnit,omitempty"`
	Triggers    []Trigger    `json:"triggers,omitempty"`
	// ValidityTime and QuotaHoldingTime are seconds (DurationSec).
	ValidityTime        *int64               `json:"validityTime,omitempty"`
	QuotaHoldingTime    *int64               `json:"quotaHoldingTime,omitempty"`
	FinalUnitIndication *FinalUnitIndication `json:"finalUnitIndication,omitempty"`
	// VolumeQuotaThreshold is the remaining volume of the grant at which
	// the SMF reports (and asks for more).
	VolumeQuotaThreshold *uint64 `json:"volumeQuotaThreshold,omitempty"`
	UPFID                string  `json:"uPFID,omitempty"`
}

// GrantedUnit is what is granted.
type GrantedUnit struct {
	TariffTimeChange     *time.Time `json:"tariffTimeChange,omitempty"`
	Time                 *uint32    `json:"time,omitempty"`
	TotalVolume          *uint64    `json:"totalVolume,omitempty"`
	UplinkVolume         *uint64    `json:"uplinkVolume,omitempty"`
	DownlinkVolume       *uint64    `json:"downlinkVolume,omitempty"`
	ServiceSpecificUnits *uint64    `json:"serviceSpecificUnits,omitempty"`
}

// FinalUnitIndication says these are the last units and what the SMF does
// when they are used.
type FinalUnitIndication struct {
	FinalUnitAction       string          `json:"finalUnitAction"` // TERMINATE, REDIRECT or RESTRICT_ACCESS
	RestrictionFilterRule string          `json:"restrictionFilterRule,omitempty"`
	FilterID              string          `json:"filterId,omitempty"`
	RedirectServer        *RedirectServer `json:"redirectServer,omitempty"`
}

// RedirectServer is where REDIRECT sends the user.
type RedirectServer struct {
	RedirectAddressType   string `json:"redirectAddressType"` // IPV4, IPV6, URL or URI
	RedirectServerAddress string `json:"redirectServerAddress"`
}

// ChargingNotifyRequest is what the CHF sends to a session's notifyUri.
type ChargingNotifyRequest struct {
	NotificationType       string                   `json:"notificationType"` // REAUTHORIZATION or ABORT_CHARGING
	ReauthorizationDetails []ReauthorizationDetails `json:"reauthorizationDetails,omitempty"`
}

// ReauthorizationDetails names a rating group to re-authorise.
type ReauthorizationDetails struct {
	ServiceID                *uint32 `json:"serviceId,omitempty"`
	RatingGroup              *uint32 `json:"ratingGroup,omitempty"`
	QuotaManagementIndicator string  `json:"quotaManagementIndicator,omitempty"`
}

// ChargingNotifyResponse is the consumer's answer to a notification (or
// 204 with no body).
type ChargingNotifyResponse struct {
	InvocationResult *InvocationResult `json:"invocationResult,omitempty"`
}

// ProblemDetails is a 3GPP error body (application/problem+json): RFC
// 9457's members and cause, the machine-readable reason.
type ProblemDetails struct {
	Type              string         `json:"type,omitempty"`
	Title             string         `json:"title,omitempty"`
	Status            int            `json:"status,omitempty"`
	Detail            string         `json:"detail,omitempty"`
	Instance          string         `json:"instance,omitempty"`
	Cause             string         `json:"cause,omitempty"`
	InvalidParams     []InvalidParam `json:"invalidParams,omitempty"`
	SupportedFeatures string         `json:"supportedFeatures,omitempty"`
}

// InvalidParam names a bad attribute as a JSON pointer and says why.
type InvalidParam struct {
	Param  string `json:"param"`
	Reason string `json:"reason,omitempty"`
}

// Values of the enumerations DPCS writes.
const (
	NotificationReauthorization = "REAUTHORIZATION"
	// NotificationAbortCharging tells the SMF that DPCS ended the session
	// (the sweep closed it): the SMF ends it too.
	NotificationAbortCharging = "ABORT_CHARGING"

	ResultSuccess              = "SUCCESS"
	ResultEndUserServiceDenied = "END_USER_SERVICE_DENIED"
	ResultQuotaLimitReached    = "QUOTA_LIMIT_REACHED"

	ActionTerminate      = "TERMINATE"
	ActionRedirect       = "REDIRECT"
	ActionRestrictAccess = "RESTRICT_ACCESS"
	RedirectAddressURL   = "URL"
)
