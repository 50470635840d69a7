// keyboard.js runs in the page and installs window.__edihubKeyboard, which
// CheckKeyboard drives between Tab presses: setup notes where each wanted
// element is and how every focusable element looks unfocused, then puts the
// focus at the start of the document; step tells which element Tab reached
// and whether its look changed.
window.__edihubKeyboard = (() => {
  const focusable = "a[href], area[href], button, input:not([type=hidden]), select, textarea, iframe, summary, [tabindex], [contenteditable]";
  // look is what a focus indicator can change, as a person would see it: an
  // outline or border that is drawn (an offset of an outline that is not
  // drawn changes nothing), a shadow, the background, colour and underline.
  const transparent = (c) => c === "transparent" || /,\s*0\)$/.test(c);
  const look = (el) => {
    const cs = getComputedStyle(el);
    const drawn = (style, width, colour) => style !== "none" && style !== "hidden" && parseFloat(width) > 0 && !transparent(colour);
    const outline = drawn(cs.outlineStyle, cs.outlineWidth, cs.outlineColor)
      ? [cs.outlineStyle, cs.outlineWidth, cs.outlineColor, cs.outlineOffset].join(" ") : "none";
    const border = ["top", "right", "bottom", "left"].map((side) => {
      const [style, width, colour] = ["style", "width", "color"].map((p) => cs.getPropertyValue(`border-${side}-${p}`));
      return drawn(style, width, colour) ? [style, width, colour].join(" ") : "none";
    });
    return JSON.stringify([outline, cs.boxShadow, border, cs.backgroundColor, cs.color, cs.textDecorationLine]);
  };
  function describe(el) {
    let s = el.tagName.toLowerCase();
    if (el.id) s += "#" + el.id;
    const name = el.getAttribute("name");
    if (name) s += `[name="${name}"]`;
    const text = (el.textContent || "").replace(/\s+/g, " ").trim();
    if (text && !["SELECT", "TEXTAREA"].includes(el.tagName)) s += ` "${text.length > 40 ? text.slice(0, 40) + "…" : text}"`;
    return s;
  }

  let want = [], unfocused = new Map(), visited = new Set(), marker = null;
  return {
    setup(selectors) {
      if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
      const missing = [];
      want = selectors.map((sel, i) => {
        let el = null;
        try { el = document.querySelector(sel); } catch (e) { /* invalid selector */ }
        if (!el) missing.push(i);
        return el;
      });
      const all = Array.from(document.querySelectorAll(focusable));
      for (const el of all) unfocused.set(el, look(el));
      const positive = all.filter((el) => el.tabIndex > 0).map((el) => `${describe(el)} (tabindex=${el.tabIndex})`);
      // Tab from an element at the very start of the body reaches the
      // first element of the document's tab order, wherever the focus was
      // (unless elements have a positive tabindex: Tab from an element
      // outside the order goes on in tree order).
      marker = document.createElement("span");
      marker.tabIndex = -1;
      document.body.prepend(marker);
      marker.focus();
      return {missing, positive, stops: all.length};
    },
    step() {
      if (marker) { marker.remove(); marker = null; }
      const el = document.activeElement;
      if (!el || el === document.body || el === document.documentElement) return {left: true};
      // A focus style that fades in is judged by where it ends.
      for (const a of el.getAnimations ? el.getAnimations() : []) {
        if (typeof CSSTransition !== "undefined" && a instanceof CSSTransition) a.finish();
      }
      // An element that was not there at setup needs an outline, a shadow
      // or a border.
      const [outline, shadow, border] = JSON.parse(look(el));
      const visible = unfocused.has(el)
        ? unfocused.get(el) !== look(el)
        : outline !== "none" || shadow !== "none" || border.some((b) => b !== "none");
      const again = visited.has(el);
      visited.add(el);
      return {left: false, again, index: want.indexOf(el), element: describe(el), visible};
    },
    restart() { visited.clear(); },
    describe(i) { return want[i] ? describe(want[i]) : ""; },
  };
})();
