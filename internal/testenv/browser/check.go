package browser

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/chromedp/chromedp"
)

// Problem is one thing a check found wrong with a page.
type Problem struct {
	// Rule names the check: "lang", "title", "h1", "label", "alt", "name",
	// "contrast" (CheckAccessibility); "keyboard", "focus-visible"
	// (CheckKeyboard).
	Rule string `json:"rule"`
	// Element says where: tag, id, name and the start of its text, or
	// "document".
	Element string `json:"element"`
	// Detail says what is wrong and what would be right.
	Detail string `json:"detail"`
}

func (p Problem) String() string { return p.Rule + ": " + p.Element + ": " + p.Detail }

//go:embed a11y.js
var a11yJS string

// CheckAccessibility checks the page in the tab as it is now and returns
// what it found wrong; none for a page that passes:
//
//   - lang: the html element has a lang attribute;
//   - title: the document has a title;
//   - h1: the page has exactly one h1;
//   - label: every input (but hidden, submit, button, reset and image),
//     select and textarea has a label: label for=, a wrapping label,
//     aria-label or aria-labelledby, with text;
//   - alt: every img and input type=image has an alt attribute (empty
//     for decoration);
//   - name: every button, link (a href), role=button or role=link and
//     input button has an accessible name: its text, alt of its images,
//     value, aria-label, aria-labelledby or title;
//   - contrast: rendered text contrasts with its background by at least
//     4.5:1, or 3:1 for large text (24px, or 18.66px bold), the WCAG 2
//     ratio of relative luminances. The text colour comes from the
//     computed style (with the elements' opacity); the background is
//     composed from the background colours of the element and its
//     ancestors down to the first opaque one, over white. Text over a
//     background image, disabled controls, the values shown in form
//     controls and text hidden or clipped to a pixel are not judged; an
//     element positioned over another is judged against its ancestors'
//     background, not what it covers.
//
// Errors are running the check, not findings.
func CheckAccessibility(ctx context.Context) ([]Problem, error) {
	problems, err := chromedp.Run(ctx, chromedp.Evaluate[[]Problem](a11yJS))
	if err != nil {
		return nil, fmt.Errorf("browser: check accessibility: %w", err)
	}
	return problems, nil
}

//go:embed keyboard.js
var keyboardJS string

// CheckKeyboard presses Tab from the start of the page in the tab, as a
// person without a mouse would, and returns what it found wrong:
//
//   - keyboard: an element of want (CSS selectors, the first match of each)
//     does not exist, is never reached, or is reached out of want's order;
//     an element has a positive tabindex, which takes it out of the
//     document's order;
//   - focus-visible: an element Tab reached looks the same focused as
//     unfocused (outline, box-shadow, border, background, colour and
//     underline compared in computed styles), so a person cannot see
//     where the focus is.
//
// Tab stops when the focus leaves the page or comes back to an element it
// reached before; Tab inside an iframe is not followed. The page's focus
// moves; while the check runs, an empty span at the start of the body
// (where Tab starts) and window.__edihubKeyboard are there too.
func CheckKeyboard(ctx context.Context, want []string) ([]Problem, error) {
	sels, err := json.Marshal(want)
	if err != nil {
		return nil, fmt.Errorf("browser: check keyboard: %w", err)
	}
	type setup struct {
		Missing  []int    `json:"missing"`
		Positive []string `json:"positive"`
		Stops    int      `json:"stops"`
	}
	s, err := chromedp.Run(ctx, chromedp.Evaluate[setup](keyboardJS+"; __edihubKeyboard.setup("+string(sels)+")"))
	if err != nil {
		return nil, fmt.Errorf("browser: check keyboard: %w", err)
	}
	defer func() { _ = chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void]("delete window.__edihubKeyboard")) }()

	var problems []Problem
	missing := make(map[int]bool)
	for _, i := range s.Missing {
		missing[i] = true
		problems = append(problems, Problem{Rule: "keyboard", Element: want[i], Detail: "the selector matches no element"})
	}
	for _, p := range s.Positive {
		problems = append(problems, Problem{Rule: "keyboard", Element: p, Detail: "a positive tabindex takes it out of the document's tab order"})
	}

	type step struct {
		Left    bool   `json:"left"`
		Again   bool   `json:"again"`
		Index   int    `json:"index"`
		Element string `json:"element"`
		Visible bool   `json:"visible"`
	}
	reached := make(map[int]bool) // indexes of want Tab reached
	var order []int               // the same, in the order Tab reached them
	// With a positive tabindex on the page, the round from setup's start
	// is not the page's order: go round to the end first, where the focus
	// leaves the page, and record the round that enters it from its start.
	recording := len(s.Positive) == 0
	for press := 1; press <= 2*(s.Stops+1); press++ {
		if err := chromedp.Do(ctx, chromedp.KeyEvent("\t")); err != nil {
			return nil, fmt.Errorf("browser: check keyboard: press Tab: %w", err)
		}
		st, err := chromedp.Run(ctx, chromedp.Evaluate[step]("__edihubKeyboard.step()"))
		if err != nil {
			return nil, fmt.Errorf("browser: check keyboard: %w", err)
		}
		if !recording {
			if st.Left {
				recording = true
				if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void]("__edihubKeyboard.restart()")); err != nil {
					return nil, fmt.Errorf("browser: check keyboard: %w", err)
				}
			}
			continue
		}
		if st.Left || st.Again {
			break
		}
		if !st.Visible {
			problems = append(problems, Problem{Rule: "focus-visible", Element: st.Element, Detail: "looks the same focused as unfocused (no outline, box-shadow, border or colour change)"})
		}
		if st.Index >= 0 && !reached[st.Index] {
			reached[st.Index] = true
			order = append(order, st.Index)
		}
	}

	for i, sel := range want {
		if reached[i] || missing[i] {
			continue
		}
		el, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf("__edihubKeyboard.describe(%d)", i)))
		if err != nil {
			return nil, fmt.Errorf("browser: check keyboard: %w", err)
		}
		problems = append(problems, Problem{Rule: "keyboard", Element: el, Detail: fmt.Sprintf("Tab never reaches it (selector %q)", sel)})
	}
	// order holds the reached elements of want as Tab met them; each must
	// come after the ones listed before it in want.
	for k := 1; k < len(order); k++ {
		if order[k] < order[k-1] {
			problems = append(problems, Problem{
				Rule:    "keyboard",
				Element: want[order[k]],
				Detail:  fmt.Sprintf("Tab reaches it after %s; want it before (the order of want: %s)", want[order[k-1]], strings.Join(want, ", ")),
			})
		}
	}
	return problems, nil
}
