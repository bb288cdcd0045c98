// Live updates without a reload: an element with data-live="SECONDS" is fetched again from
// the same URL every SECONDS and replaced. Pages read fine without it.
for (const el of document.querySelectorAll("[data-live]")) {
  const every = Math.max(2, Number(el.dataset.live) || 5) * 1000;
  const refresh = async () => {
    try {
      const res = await fetch(location.href, { credentials: "same-origin" });
      if (res.ok) {
        const doc = new DOMParser().parseFromString(await res.text(), "text/html");
        const fresh = doc.getElementById(el.id);
        if (fresh) el.innerHTML = fresh.innerHTML;
      }
    } catch (_) { /* the next round tries again */ }
    setTimeout(refresh, every);
  };
  setTimeout(refresh, every);
}
