// Package view holds the HTTP API's wire types that more than one of its
// route groups declare: the fields of text people write (Text,
// MultilineText, checked by internal/usertext), a member's policy and
// standing as every policy change answers them (PolicyView), a usage
// report's shares, and the access token's security scheme. Package api
// names them under its own names (type aliases), and its route packages
// (service/api/backoffice) use them directly, so each appears once in the
// OpenAPI document.
package view
