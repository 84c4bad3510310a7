package lancheck

// Judge turns what Observe saw into one item per check (two for the
// checks with a family each). It is pure.
func Judge(n Network, o Observations) []Item {
	return nil // written next
}
