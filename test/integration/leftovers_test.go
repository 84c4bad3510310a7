//go:build !vm

package integration

// nothingLeftInTheVM is vm_leftovers_test.go's check; without the vm tag
// there is no VM to check.
func nothingLeftInTheVM() error { return nil }
