// The dashboard's one script, four progressive enhancements. Live updates without a reload:
// an element with data-live="SECONDS" is fetched again from its page's URL (data-src, where
// a refused form's answer stands at the form's address; else the same URL) every SECONDS and
// replaced when it changed. Pages read fine without it. Keyboard focus inside the element
// survives the replacement: the same link or button (by its target) is focused again. When
// the answer no longer holds the element (the session ended, and the sign-in page came), the
// page is loaded again, so it shows that instead of going stale without a word. A page the
// browser restores from its back/forward cache is loaded again too: after a sign-out, Back
// must not show the signed-in page.
addEventListener("pageshow", (event) => {
  // A GET of the same address: a form's answer is not sent again (its address leads back to
  // the form's page).
  if (event.persisted) location.replace(location.href);
});
const focusKey = (node) => [
  node.tagName,
  node.getAttribute("href") || "",
  node.closest("form")?.getAttribute("action") || "",
  node.closest("form")?.querySelector("[name=id],[name=name],[name=deployment]")?.value || "",
].join(" ");

for (const el of document.querySelectorAll("[data-live]")) {
  const every = Math.max(2, Number(el.dataset.live) || 5) * 1000;
  const refresh = async () => {
    try {
      const res = await fetch(el.dataset.src || location.href, { credentials: "same-origin" });
      if (res.ok) {
        const doc = new DOMParser().parseFromString(await res.text(), "text/html");
        const fresh = doc.getElementById(el.id);
        if (!fresh && res.redirected) {
          location.reload();
          return;
        }
        if (fresh && fresh.innerHTML !== el.innerHTML) {
          const focused = el.contains(document.activeElement) ? focusKey(document.activeElement) : null;
          el.innerHTML = fresh.innerHTML;
          if (focused) {
            const again = [...el.querySelectorAll("a, button")].find((n) => focusKey(n) === focused);
            again?.focus();
          }
        }
      }
    } catch (_) { /* the next round tries again */ }
    setTimeout(refresh, every);
  };
  setTimeout(refresh, every);
}

// Copy buttons: <button data-copy="ID" hidden> copies the text of element ID. Hidden without
// this script, since it would do nothing; the text can always be selected by hand.
for (const button of document.querySelectorAll("button[data-copy]")) {
  const source = document.getElementById(button.dataset.copy);
  if (!source) continue;
  button.hidden = false;
  button.addEventListener("click", async () => {
    const text = source.textContent;
    let done = false;
    try {
      await navigator.clipboard.writeText(text);
      done = true;
    } catch (_) {
      const range = document.createRange();
      range.selectNodeContents(source);
      const selection = getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      done = document.execCommand("copy");
    }
    button.textContent = done ? "Copied" : "Press Ctrl+C to copy";
  });
}

// A page that shows a secret once answers a form: its address becomes its list's
// (data-shown-once), so a reload, or going back and forward, fetches that list instead of
// sending the form again, which would make another key, token or webhook secret.
const shownOnce = document.querySelector("[data-shown-once]");
if (shownOnce) history.replaceState(null, "", shownOnce.dataset.shownOnce);
