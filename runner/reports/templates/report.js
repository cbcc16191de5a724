// report.html's filters, sort, search and open case, all kept in the URL fragment.
//
// Inline, allowed by the page's Content Security Policy by this file's exact hash. It makes no
// request of any kind, evaluates no text and parses no markup: a case's detail is a clone of
// its server-rendered template `t-N`, and the only text it writes goes in as textContent.
// Without it the page is complete; with it, 20,000 rows stay quick because it only reads the
// rows' data-* attributes up front and builds the search index on the first search.
"use strict";
(() => {
  const form = document.getElementById("filters");
  const table = document.getElementById("cases");
  if (!form || !table) return;
  const controls = form.elements;
  const shown = document.getElementById("shown");
  const SIDES = ["reference", "candidate"];
  // each names a side (or a ratio gate: paired) among the tokens of the row's data-*
  const SIDED = ["failed", "passed", "request", "paired"];
  // `missed` names the side whose codes the `miss` filter reads (either, when empty)
  const SELECTS = ["gate", "stratum", "moved", "miss", "missed", ...SIDED];
  const KEYS = [...SELECTS, "changed", "q", "sort", "case"];
  const DEFAULT_SORT = controls.sort.options[0].value;
  // the gate select lists the classes in the gate's own order: sorting by class follows it
  const classRank = new Map(Array.from(controls.gate.options, (option, i) => [option.value, i]));

  const cases = Array.from(table.querySelectorAll("tr.case"), (row) => {
    const delta = row.dataset.delta ? Number(row.dataset.delta) : NaN;
    return {
      row,
      n: Number(row.id.slice(2)),
      id: row.dataset.id,
      gate: row.dataset.gate,
      stratum: row.dataset.stratum,
      moved: row.dataset.moved,
      // per side, its miss codes and unscored stamp: one a line, spaces kept
      misses: Object.fromEntries(SIDES.map((side) => {
        const codes = row.getAttribute(`data-miss-${side}`);
        return [side, codes ? codes.split("\n") : []];
      })),
      sides: Object.fromEntries(SIDED.map((key) => [key, (row.dataset[key] || "").split(" ")])),
      delta: Number.isFinite(delta) ? delta : null,
      rank: classRank.get(row.dataset.gate) ?? classRank.size,
      detail: null, // the detail row (tr.detail) while the case is open
      text: null, // lower-cased id, row and detail text, once something was searched
    };
  });
  const byRow = new Map(cases.map((c) => [c.row, c]));
  // the table's row groups (a long table comes in several, so the browser can skip laying out
  // those off screen) and how many cases each holds
  const groups = Array.from(table.tBodies, (body) => [body, body.querySelectorAll("tr.case").length]);
  let order = cases; // the rows' order in the table now
  let opened = null;
  let state = {};

  const ORDERS = {
    class: (a, b) => a.rank - b.rank || a.n - b.n,
    // most negative first (the candidate's worst losses), cases without a score last
    delta: (a, b) =>
      (a.delta === null) - (b.delta === null) || a.delta - b.delta || a.n - b.n,
    id: (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : a.n - b.n),
  };

  function read(hash) {
    const params = new URLSearchParams(hash.replace(/^#/, ""));
    return Object.fromEntries(KEYS.map((key) => [key, params.get(key) || ""]));
  }

  function write() {
    const params = new URLSearchParams();
    for (const key of KEYS) {
      if (state[key] && !(key === "sort" && state[key] === DEFAULT_SORT)) {
        params.set(key, state[key]);
      }
    }
    const hash = params.toString();
    if (hash !== location.hash.slice(1)) {
      history.replaceState(null, "", hash ? `#${hash}` : location.pathname + location.search);
    }
    // what the table shows now, as its fragment: equal to location.hash (without "#") once
    // the view a link or a control asked for is applied (tests and scripts wait on it)
    table.dataset.view = hash;
  }

  function choose(select, value) {
    // a link may name a value this run's options lack: show it, so the view says what it is
    if (value && !Array.from(select.options).some((option) => option.value === value)) {
      const option = document.createElement("option");
      option.value = value;
      option.textContent = value;
      select.append(option);
      select.closest("label").hidden = false; // a choice hidden for having no case here
    }
    select.value = value;
  }

  function show(asked) {
    for (const key of SELECTS) choose(controls[key], asked[key]);
    controls.changed.checked = asked.changed === "1";
    controls.q.value = asked.q;
    controls.sort.value = Object.hasOwn(ORDERS, asked.sort) ? asked.sort : DEFAULT_SORT;
  }

  function fromControls() {
    const now = Object.fromEntries(SELECTS.map((key) => [key, controls[key].value]));
    now.changed = controls.changed.checked ? "1" : "";
    now.q = controls.q.value.trim();
    now.sort = controls.sort.value;
    now.case = state.case || "";
    return now;
  }

  function index() {
    for (const c of cases) {
      if (c.text !== null) continue;
      const template = document.getElementById(`t-${c.n}`);
      const detail = template ? template.content.textContent : "";
      c.text = `${c.id}\n${c.row.textContent}\n${detail}`.toLowerCase();
    }
  }

  function matches(c, q) {
    const s = state;
    return (
      (!s.gate || c.gate === s.gate) &&
      (!s.stratum || c.stratum === s.stratum) &&
      // a side moved when it moved alone or both did
      (!s.moved || c.moved === s.moved || c.moved === "both") &&
      (!(s.miss || s.missed) ||
        (s.missed ? [s.missed] : SIDES).some((side) =>
          (c.misses[side] || []).some(
            (m) => !s.miss || m === s.miss || m.startsWith(`${s.miss}:`),
          ),
        )) &&
      SIDED.every((key) => !s[key] || c.sides[key].includes(s[key])) &&
      (!s.changed || c.gate !== "unchanged") &&
      (!q || c.text.includes(q))
    );
  }

  // Sorts and filters in one pass: the cases shown come first, in order, and fill the table's
  // row groups from the top, so a group holds either shown cases or none and a group with none
  // is hidden whole. Off-screen groups are never laid out (content-visibility in report.css),
  // and none of them is a tall blank left by rows filtered away.
  function arrange() {
    const q = state.q.toLowerCase();
    if (q) index();
    const sorted = cases.slice().sort(ORDERS[state.sort]);
    const kept = [];
    const dropped = [];
    for (const c of sorted) (matches(c, q) ? kept : dropped).push(c);
    const arranged = kept.concat(dropped);
    for (const [i, c] of arranged.entries()) {
      const hide = i >= kept.length;
      if (c.row.hidden !== hide) {
        c.row.hidden = hide;
        if (c.detail) c.detail.hidden = hide;
      }
    }
    const moved = arranged.some((c, i) => c !== order[i]);
    let next = 0;
    for (const [body, size] of groups) {
      if (moved) {
        const rows = document.createDocumentFragment();
        for (const c of arranged.slice(next, next + size)) {
          rows.append(...(c.detail ? [c.row, c.detail] : [c.row]));
        }
        body.append(rows);
      }
      body.hidden = next >= kept.length;
      next += size;
    }
    order = arranged;
    shown.textContent = `${kept.length} of ${cases.length} cases`;
  }

  function close() {
    if (!opened) return;
    opened.detail.remove();
    opened.detail = null;
    opened.row.querySelector("a.open")?.setAttribute("aria-expanded", "false");
    opened = null;
  }

  function open(c, scroll) {
    if (opened === c) return;
    close();
    const template = document.getElementById(`t-${c.n}`);
    if (!template) return;
    const detail = document.createElement("tr");
    detail.className = "detail";
    detail.hidden = c.row.hidden;
    const cell = detail.insertCell();
    cell.colSpan = c.row.cells.length;
    cell.append(template.content.cloneNode(true));
    c.row.after(detail);
    c.detail = detail;
    c.row.querySelector("a.open")?.setAttribute("aria-expanded", "true");
    opened = c;
    if (scroll) c.row.scrollIntoView({ block: "start" });
  }

  function update() {
    state = fromControls();
    arrange();
    write();
  }

  function restore(scroll) {
    const asked = read(location.hash);
    show(asked);
    state = { ...fromControls(), case: asked.case };
    arrange();
    const c = state.case ? cases.find((one) => one.id === state.case) : undefined;
    if (c) {
      open(c, scroll);
    } else {
      state.case = "";
      close();
      if (scroll) form.scrollIntoView({ block: "start" });
    }
    write();
  }

  let typing = 0;
  form.addEventListener("submit", (event) => event.preventDefault());
  form.addEventListener("change", update);
  controls.q.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(update, 150);
  });
  table.addEventListener("click", (event) => {
    const link = event.target.closest("a.open");
    const c = link && byRow.get(link.closest("tr.case"));
    if (!c) return;
    event.preventDefault();
    if (opened === c) {
      close();
      state.case = "";
    } else {
      open(c, false);
      state.case = c.id;
    }
    write();
  });
  // a reason's link is a fragment: following it is a hashchange, unless the view is already it
  document.getElementById("reasons")?.addEventListener("click", (event) => {
    const link = event.target.closest("a[href^='#']");
    if (link && link.hash === location.hash) {
      event.preventDefault();
      restore(true);
    }
  });
  window.addEventListener("hashchange", () => restore(true));

  // The cases' templates may follow this script, so the table is usable while they are still
  // being parsed: once they are all there, a search and an open case are done again.
  document.addEventListener("DOMContentLoaded", () => {
    if (state.q) {
      for (const c of cases) c.text = null;
      arrange();
    }
    const c = state.case && !opened && cases.find((one) => one.id === state.case);
    if (c) open(c, true);
  });

  form.hidden = false;
  restore(Boolean(read(location.hash).case));
  performance.mark("parallax:filters-ready"); // bench/report_scale.py reads when that was
})();
