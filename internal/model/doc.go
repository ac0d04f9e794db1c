// Package model holds the Promela model of idem's lease protocol; its test runs spin.
package model
