// a11y.js runs in the page (Runtime.evaluate, which the page's
// Content-Security-Policy does not govern) and returns the problems it finds
// as [{rule, element, detail}]. See CheckAccessibility for the rules.
(() => {
  const problems = [];
  const report = (rule, el, detail) =>
    problems.push({rule, element: el ? describe(el) : "document", detail});

  function describe(el) {
    let s = el.tagName.toLowerCase();
    if (el.id) s += "#" + el.id;
    const name = el.getAttribute("name");
    if (name) s += `[name="${name}"]`;
    const type = el.getAttribute("type");
    if (type && el.tagName === "INPUT") s += `[type="${type}"]`;
    const text = (el.textContent || "").replace(/\s+/g, " ").trim();
    if (text && !["HTML", "BODY", "SELECT", "TEXTAREA"].includes(el.tagName)) {
      s += ` "${text.length > 40 ? text.slice(0, 40) + "…" : text}"`;
    }
    return s;
  }

  const clean = (s) => (s || "").replace(/\s+/g, " ").trim();

  // text is the name an element's content gives it: its text, the alt of
  // its images and the aria-label of its parts, skipping hidden parts and,
  // when skipControls, nested form controls (a label wrapping a select
  // must not be named by the select's options).
  function text(node, skipControls) {
    if (node.nodeType === Node.TEXT_NODE) return node.nodeValue;
    if (node.nodeType !== Node.ELEMENT_NODE) return "";
    const el = node;
    if (el.hidden || el.getAttribute("aria-hidden") === "true") return "";
    if (["SCRIPT", "STYLE", "TEMPLATE", "NOSCRIPT"].includes(el.tagName)) return "";
    if (skipControls && ["INPUT", "SELECT", "TEXTAREA", "BUTTON"].includes(el.tagName)) return "";
    if (clean(el.getAttribute("aria-label"))) return " " + el.getAttribute("aria-label") + " ";
    if (el.tagName === "IMG" || (el.tagName === "INPUT" && el.type === "image")) return " " + (el.getAttribute("alt") || "") + " ";
    let s = "";
    for (const c of el.childNodes) s += text(c, skipControls);
    return s;
  }

  function labelledBy(el) {
    const ids = clean(el.getAttribute("aria-labelledby"));
    if (!ids) return "";
    return clean(ids.split(" ").map((id) => {
      const ref = document.getElementById(id);
      return ref ? text(ref, false) : "";
    }).join(" "));
  }

  // Document: a language and a title.
  if (!clean(document.documentElement.getAttribute("lang"))) {
    report("lang", document.documentElement, "the html element has no lang attribute");
  }
  if (!clean(document.title)) {
    report("title", null, "the document has no title");
  }

  // Headings: exactly one h1.
  const h1s = document.querySelectorAll("h1");
  if (h1s.length !== 1) {
    report("h1", h1s[1] || null, `${h1s.length} h1 elements, want exactly 1`);
  }

  // Form controls: a label, wrapping or for=, aria-label or aria-labelledby.
  const noLabel = ["hidden", "submit", "button", "reset", "image"];
  for (const el of document.querySelectorAll("input, select, textarea")) {
    if (el.tagName === "INPUT" && noLabel.includes(el.type)) continue;
    const named =
      labelledBy(el) ||
      clean(el.getAttribute("aria-label")) ||
      Array.from(el.labels || []).some((l) => clean(text(l, true)));
    if (!named) report("label", el, "form control without a label (label for=, a wrapping label, aria-label or aria-labelledby)");
  }

  // Images: an alt attribute (empty for decoration).
  for (const el of document.querySelectorAll("img:not([alt]), input[type=image]:not([alt])")) {
    report("alt", el, "image without an alt attribute");
  }

  // Buttons and links: a name from content, aria-label, aria-labelledby or title.
  const actions = "button, a[href], [role=button], [role=link], input[type=submit], input[type=reset], input[type=button], input[type=image]";
  for (const el of document.querySelectorAll(actions)) {
    let name = labelledBy(el) || clean(el.getAttribute("aria-label"));
    if (!name && el.tagName === "INPUT") {
      if (el.type === "image") name = clean(el.getAttribute("alt"));
      else if (el.type === "button") name = clean(el.value);
      else name = clean(el.value) || el.type; // submit and reset have a default
    }
    if (!name) name = clean(text(el, false)) || clean(el.getAttribute("title"));
    if (!name) report("name", el, "button or link without an accessible name");
  }

  // Contrast of visible text against its effective background.
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 1;
  const paint = canvas.getContext("2d", {willReadFrequently: true});
  const colors = new Map();
  function rgba(css) {
    if (colors.has(css)) return colors.get(css);
    let c;
    const m = css.match(/^rgba?\(\s*([\d.]+)[,\s]+([\d.]+)[,\s]+([\d.]+)(?:\s*[,/]\s*([\d.]+%?))?\s*\)$/);
    if (m) {
      let a = m[4] === undefined ? 1 : parseFloat(m[4]);
      if (m[4] && m[4].endsWith("%")) a /= 100;
      c = {r: +m[1], g: +m[2], b: +m[3], a};
    } else {
      // Any other syntax (color(), oklch(), ...): let the canvas convert it to sRGB.
      paint.clearRect(0, 0, 1, 1);
      paint.fillStyle = "rgba(0,0,0,0)";
      paint.fillStyle = css;
      paint.fillRect(0, 0, 1, 1);
      const d = paint.getImageData(0, 0, 1, 1).data;
      c = {r: d[0], g: d[1], b: d[2], a: d[3] / 255};
    }
    colors.set(css, c);
    return c;
  }
  const over = (top, bottom) => {
    const a = top.a + bottom.a * (1 - top.a);
    if (a === 0) return {r: 0, g: 0, b: 0, a: 0};
    const mix = (t, b) => (t * top.a + b * bottom.a * (1 - top.a)) / a;
    return {r: mix(top.r, bottom.r), g: mix(top.g, bottom.g), b: mix(top.b, bottom.b), a};
  };
  const luminance = ({r, g, b}) => {
    const lin = (v) => {
      v /= 255;
      return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    };
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  };
  const hex = ({r, g, b}) => "#" + [r, g, b].map((v) => Math.round(v).toString(16).padStart(2, "0")).join("");

  // background composes the background colours of el and its ancestors down
  // to the first opaque one, over white. null: an image is in the way, and
  // the contrast cannot be computed from styles.
  function background(el) {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.backgroundImage !== "none") return null;
      const c = rgba(cs.backgroundColor);
      if (c.a > 0) layers.push(c);
      if (c.a >= 1) break;
    }
    let bg = {r: 255, g: 255, b: 255, a: 1};
    for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg);
    return bg;
  }

  const seen = new Set();
  const walker = document.createTreeWalker(document.body || document.documentElement, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || seen.has(el) || !n.nodeValue.trim()) continue;
    seen.add(el);
    if (el.closest("script, style, template, noscript, option, optgroup")) continue;
    if (el.closest(":disabled")) continue; // WCAG exempts inactive controls
    const rect = el.getBoundingClientRect();
    if (el.getClientRects().length === 0 || rect.width <= 1 || rect.height <= 1) continue; // not rendered, or visually hidden
    const cs = getComputedStyle(el);
    if (cs.visibility !== "visible") continue;
    let opacity = 1;
    for (let e = el; e; e = e.parentElement) opacity *= parseFloat(getComputedStyle(e).opacity);
    if (opacity === 0) continue;
    const bg = background(el);
    if (!bg) continue;
    const c = rgba(cs.color);
    const fg = over({...c, a: c.a * opacity}, bg);
    const l1 = luminance(fg), l2 = luminance(bg);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const size = parseFloat(cs.fontSize);
    const large = size >= 24 || (size >= 18.66 && parseInt(cs.fontWeight, 10) >= 700);
    const want = large ? 3 : 4.5;
    if (ratio < want) {
      // Two decimals, never rounded up to the threshold it misses.
      let shown = Math.round(ratio * 100) / 100;
      if (shown >= want) shown = Math.floor(ratio * 100) / 100;
      report("contrast", el, `${shown.toFixed(2)}:1 (${hex(fg)} on ${hex(bg)}, ${size}px ${large ? "large" : "normal"} text), want at least ${want}:1`);
    }
  }
  return problems;
})()
