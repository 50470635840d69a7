package receiver

// InFlight reports the bytes h's requests hold now and at most so far.
func InFlight(h *Handler) (inUse, peak int64) {
	return h.budget.inUse(), h.budget.peakUse()
}

// BodyStep is how much a reservation grows at a time as a body
// arrives.
const BodyStep = bodyStep
