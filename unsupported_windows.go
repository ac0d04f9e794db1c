//go:build windows

package main

// idem runs commands in process groups, signals them and checks a dead
// owner's processes through Unix interfaces that Windows does not have.
// main.go is left out of a Windows build, so that this one undefined name
// is the build's only error, instead of a page of them from the packages
// main would import.
var _ = idem_does_not_support_windows_yet
