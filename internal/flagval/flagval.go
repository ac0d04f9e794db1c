// Package flagval parses untrusted command-line values: exit-code sets,
// durations with a day unit, and byte sizes.
//
// Each parser is a plain function returning a descriptive error, and each
// has a matching pflag.Value (Codes, Duration, Size) that writes through a
// pointer, so commands can bind flags straight into their options struct.
// Parsers never panic, never wrap on overflow and reject negative values;
// their errors are lowercase, quote the input and state the rule.
package flagval
