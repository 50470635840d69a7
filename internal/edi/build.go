package edi

// builder assembles a Document from envelope events common to X12 and
// EDIFACT: interchange, group and set open and close. Past the limits it
// keeps counting in scratch values that are not recorded.
type builder struct {
	lim  Limits
	doc  Document
	ic   *Interchange
	g    *Group
	set  *Set
	sets int

	scratchIC  Interchange
	scratchG   Group
	scratchSet Set
}

func addProblem(ps *[]Problem, p Problem) {
	for _, q := range *ps {
		if q == p {
			return
		}
	}
	*ps = append(*ps, p)
}

func (b *builder) openInterchange(ic Interchange) {
	if b.ic != nil {
		b.closeInterchange(-1, "", false)
	}
	ic.DeclaredCount = -1
	if len(b.doc.Interchanges) < b.lim.MaxInterchanges {
		b.doc.Interchanges = append(b.doc.Interchanges, ic)
		b.ic = &b.doc.Interchanges[len(b.doc.Interchanges)-1]
		return
	}
	b.doc.Truncated = true
	b.scratchIC = ic
	b.ic = &b.scratchIC
}

func (b *builder) openGroup(g Group) {
	if b.g != nil {
		b.closeGroup(-1, "", false)
	}
	g.DeclaredCount = -1
	b.ic.GroupCount++
	if len(b.ic.Groups) < b.lim.MaxGroups && b.ic != &b.scratchIC {
		b.ic.Groups = append(b.ic.Groups, g)
		b.g = &b.ic.Groups[len(b.ic.Groups)-1]
		return
	}
	b.doc.Truncated = true
	b.scratchG = g
	b.g = &b.scratchG
}

func (b *builder) openSet(s Set) {
	if b.set != nil {
		b.closeSet(-1, "", false)
	}
	if b.g == nil {
		b.openGroup(Group{Implicit: true})
	}
	s.DeclaredCount = -1
	s.Segments = 1
	if s.Ack != nil {
		s.Ack.Sender, s.Ack.Receiver = b.ic.Sender, b.ic.Receiver
	}
	b.g.SetCount++
	if b.sets < b.lim.MaxSets && b.g != &b.scratchG {
		b.sets++
		b.g.Sets = append(b.g.Sets, s)
		b.set = &b.g.Sets[len(b.g.Sets)-1]
		return
	}
	b.doc.Truncated = true
	b.scratchSet = s
	b.set = &b.scratchSet
}

// body counts a segment that is not an envelope segment.
func (b *builder) body() {
	switch {
	case b.set != nil:
		b.set.Segments++
	case b.ic != nil:
		addProblem(&b.ic.Problems, ProblemStructure)
	}
}

// closeSet ends the open set; present is false when its trailer is missing.
func (b *builder) closeSet(declared int, control string, present bool) {
	s := b.set
	b.set = nil
	if !present {
		addProblem(&s.Problems, ProblemTrailerMissing)
		return
	}
	s.Segments++
	s.DeclaredCount, s.TrailerControl = declared, control
	if declared != s.Segments {
		addProblem(&s.Problems, ProblemCountMismatch)
	}
	if control != s.ControlNumber {
		addProblem(&s.Problems, ProblemControlMismatch)
	}
}

func (b *builder) closeGroup(declared int, control string, present bool) {
	if b.set != nil {
		b.closeSet(-1, "", false)
	}
	g := b.g
	b.g = nil
	if g.Implicit {
		return
	}
	if !present {
		addProblem(&g.Problems, ProblemTrailerMissing)
		return
	}
	g.DeclaredCount = declared
	if declared != g.SetCount {
		addProblem(&g.Problems, ProblemCountMismatch)
	}
	if control != g.ControlNumber {
		addProblem(&g.Problems, ProblemControlMismatch)
	}
}

// closeInterchange ends the open interchange. EDIFACT's UNZ counts
// messages when the interchange has no UNG groups.
func (b *builder) closeInterchange(declared int, control string, present bool) {
	if b.g != nil {
		b.closeGroup(-1, "", b.g.Implicit)
	}
	ic := b.ic
	b.ic = nil
	if !present {
		addProblem(&ic.Problems, ProblemTrailerMissing)
		return
	}
	ic.DeclaredCount = declared
	if declared != b.expectedCount(ic) {
		addProblem(&ic.Problems, ProblemCountMismatch)
	}
	if control != ic.ControlNumber {
		addProblem(&ic.Problems, ProblemControlMismatch)
	}
}

func (b *builder) expectedCount(ic *Interchange) int {
	explicit, messages := 0, 0
	for _, g := range ic.Groups {
		if g.Implicit {
			messages += g.SetCount
		} else {
			explicit++
		}
	}
	if len(ic.Groups) < ic.GroupCount {
		// Unrecorded groups: the count is all that is known.
		return ic.GroupCount
	}
	if explicit == 0 && messages > 0 {
		return messages
	}
	return ic.GroupCount
}

// finish closes what the document left open.
func (b *builder) finish() {
	if b.ic != nil {
		b.closeInterchange(-1, "", false)
	}
}
