// edihub console: the one script, and an optional one: every page works
// without it. It asks for a confirmation before the forms marked
// data-confirm are sent, and refreshes the parts of a page marked
// data-refresh while their auto-refresh box is ticked.
"use strict";
document.addEventListener("submit", (ev) => {
  const msg = ev.target.dataset && ev.target.dataset.confirm;
  if (msg && !window.confirm(msg)) ev.preventDefault();
});
document.addEventListener("DOMContentLoaded", () => {
  const live = document.querySelector("[data-refresh]");
  const box = document.getElementById("autorefresh");
  if (!live || !box) return;
  box.closest("[hidden]")?.removeAttribute("hidden");
  const every = Math.max(2, Number(live.dataset.refresh) || 10) * 1000;
  let timer = null;
  const refresh = async () => {
    try {
      const res = await fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}});
      if (!res.ok) return;
      const doc = new DOMParser().parseFromString(await res.text(), "text/html");
      const fresh = doc.querySelector("[data-refresh]");
      // Replaced only when the focus is not inside: a keyboard user keeps
      // their place.
      if (fresh && !live.contains(document.activeElement)) live.innerHTML = fresh.innerHTML;
    } catch (e) {
      // Offline or signed out: the next tick tries again.
    }
  };
  const arm = () => {
    clearInterval(timer);
    timer = box.checked ? setInterval(refresh, every) : null;
  };
  box.addEventListener("change", arm);
  arm();
});
