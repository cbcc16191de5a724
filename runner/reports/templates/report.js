// report.html's case table: every case's row and detail, its filters, search and sort, all
// kept in the URL fragment.
//
// Inline, allowed by the page's Content Security Policy by this file's exact hash. It makes no
// request of any kind, evaluates no text and parses no markup. The cases are data: each
// script element of class case-data, typed application/octet-stream (which no browser runs),
// holds a block of them as deflated, base64'd JSON (runner/reports/casedata.py) whose texts
// are indexes into the block's string table. The blocks are inflated with DecompressionStream;
// the table then holds the rows of the cases shown, PAGE at a time (more as the reader
// scrolls down to them), and a case's detail is built when it is opened. Every element is
// made with createElement and every text is a text node or an attribute value, so a reply
// holding markup shows it as the text it is (its hidden characters as their escapes,
// text.visible's, made in Python).
"use strict";
(() => {
  const form = document.getElementById("filters");
  const table = document.getElementById("cases");
  const holder = document.getElementById("table");
  const more = document.getElementById("more");
  if (!form || !table || !holder || !more) return;
  const controls = form.elements;
  const shown = document.getElementById("shown");
  const moreButton = more.querySelector("button");
  const SIDES = ["reference", "candidate"];
  // each names a side (or a ratio gate: paired) among the case's tokens
  const SIDED = ["failed", "passed", "request", "paired"];
  // `missed` names the side whose codes the `miss` filter reads (either, when empty)
  const SELECTS = ["gate", "stratum", "moved", "miss", "missed", ...SIDED];
  const KEYS = [...SELECTS, "changed", "q", "sort", "case"];
  const DEFAULT_SORT = controls.sort.options[0].value;
  const PAGE = 200; // rows added to the table at a time
  const GROUP = 25; // rows a tbody: report.css's contain-intrinsic-size is this many rows high
  const INDEX_SLICE = 1000; // cases indexed for search in one idle moment
  // the gate select lists the classes in the gate's own order: sorting by class follows it
  const classRank = new Map(Array.from(controls.gate.options, (option, i) => [option.value, i]));

  let cases = [];
  let byId = new Map();
  const byRow = new Map();
  const sorted = {}; // the cases in each order, sorted the first time it is asked for
  let kept = []; // the cases the filters keep, in the order asked for
  let limit = PAGE; // how many of them the table holds
  let opened = null;
  let state = {};
  let indexed = 0; // cases whose search words are built: ahead, while the page is idle (indexAhead)

  // ------------------------------------------------------------------ the data

  function bytesOf(text) {
    if (Uint8Array.fromBase64) return Uint8Array.fromBase64(text);
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  async function inflate(element) {
    const stream = new Blob([bytesOf(element.textContent.trim())])
      .stream()
      .pipeThrough(new DecompressionStream("deflate"));
    return JSON.parse(await new Response(stream).text());
  }

  // a record's fields, in casedata.py's order
  function caseOf(block, record) {
    const S = block.strings;
    const [n, id, gate, stratum, moved, miss, delta, detail, failed, passed, request, paired] = record;
    const score = typeof delta === "number" ? delta : null;
    return {
      block,
      record,
      n,
      id: S[id],
      gate: S[gate],
      stratum: S[stratum],
      moved,
      // per side, its miss codes and unscored stamp (spaces kept)
      misses: Object.fromEntries(SIDES.map((side, i) => [side, miss[i].map((k) => S[k])])),
      sides: { failed, passed, request, paired },
      delta: score,
      deltaText: score === null ? "" : score.toFixed(3),
      detailText: S[detail] ?? "",
      rank: classRank.get(S[gate]) ?? classRank.size,
      row: null, // the case's row, once it was shown
      detail: null, // the detail row (tr.detail) while the case is open
      words: null, // the string indexes the case holds, once something was searched
      found: false, // whether it holds the text last searched for
    };
  }

  // ------------------------------------------------------------------ markup, as text only

  // an element: attributes (set as values, never parsed) and children (strings become text)
  function h(tag, attrs, ...kids) {
    const element = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") element.className = value;
      else element.setAttribute(name, value === true ? "" : String(value));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid !== null && kid !== undefined && kid !== false) element.append(kid);
    }
    return element;
  }

  function rowOf(c) {
    if (c.row) return c.row;
    const row = h("tr", {
      class: "case",
      id: `c-${c.n}`,
      "data-id": c.id,
      "data-gate": c.gate,
      "data-stratum": c.stratum,
      "data-moved": c.moved,
    });
    // a side's miss codes and unscored stamp, one a line (a code keeps its spaces and holds
    // no newline), left out when it has none
    for (const side of SIDES) {
      if (c.misses[side].length) row.setAttribute(`data-miss-${side}`, c.misses[side].join("\n"));
    }
    row.dataset.delta = c.deltaText;
    for (const key of SIDED) if (c.sides[key].length) row.dataset[key] = c.sides[key].join(" ");
    const link = h("a", { class: "open", href: `#${new URLSearchParams({ case: c.id })}` }, c.id);
    const misses = SIDES.filter((side) => c.misses[side].length).map((side) =>
      h(
        "div",
        { "data-side": side },
        h("span", { class: "side" }, `${side}:`),
        " ",
        c.misses[side].map((code, i) => [i ? " " : null, h("code", { class: "miss" }, code)]),
      ),
    );
    row.append(
      h("td", { class: "mono" }, link),
      h("td", null, h("span", { class: "tag", "data-gate": c.gate }, c.gate)),
      h("td", null, c.stratum),
      h("td", null, c.moved),
      h("td", { class: "misses small" }, misses),
      h("td", { class: "num" }, c.deltaText),
      h("td", { class: "small" }, c.detailText),
    );
    c.row = row;
    byRow.set(row, c);
    return row;
  }

  // ---- a case's detail: case.html.j2 built from the case's record, element for element

  // a side's fields, named
  const sideOf = ([side, endpoint, alias, served, sha, transport, schema, score, admitted,
    detail, misses, noise, request, reply, calls, attempts, ms, ttft, queued, backoff, stream,
    usage, raw, samples]) => ({ side, endpoint, alias, served, sha, transport, schema, score,
    admitted, detail, misses, noise, request, reply, calls, attempts, ms, ttft, queued,
    backoff, stream, usage, raw, samples });

  const score = (value, digits) => (typeof value === "number" ? value.toFixed(digits) : "—");
  const orDash = (value) => (value === null || value === undefined ? "—" : String(value));

  function detailOf(c) {
    const S = c.block.strings;
    const t = (i) => (i === null || i === undefined ? null : S[i]);
    const [stratum, disagreement, notes, expect, sides, accepted, brief] = c.record[12];

    function pieces(side) {
      const [, textAt, , , , , marks] = side.reply;
      const text = t(textAt) ?? "";
      if (!marks) return [text];
      const tag = side.side === "reference" ? "del" : "ins";
      let at = 0;
      return marks.map(([length, changed, miss]) => {
        let part = text.slice(at, at + length);
        at += length;
        if (changed) part = h(tag, { class: "w" }, part);
        return miss === null ? part : h("mark", { class: "hit", "data-miss": t(miss) }, part);
      });
    }

    function reply(side) {
      const [kind, text, cut, status, finish, why] = side.reply;
      const box = h("div", { class: "cd-reply", "data-kind": kind });
      if (kind === "none") {
        box.append(h("p", { class: "cd-none" }, `No reply: ${t(why) ?? ""}`));
        return box;
      }
      if (kind === "body") {
        const http = status === null ? "" : `, HTTP ${status}`;
        box.append(
          h("p", { class: "cd-why" }, `Not read as a reply (${t(why)}): the body as received${http}`),
        );
      }
      if (!t(text)) {
        const empty = side.calls.length ? "(no text: it answered with tool calls)" : "(empty reply)";
        box.append(h("p", { class: "cd-empty" }, empty));
      } else {
        box.append(h("pre", { class: "cd-text" }, pieces(side)));
      }
      if (cut) {
        box.append(h("p", { class: "cd-cut" }, "… cut for the report; the whole body is in raw.jsonl"));
      }
      if (t(finish)) {
        box.append(h("p", { class: "cd-meta" }, "finish reason ", h("code", null, t(finish))));
      }
      return box;
    }

    function misses(side) {
      const out = [];
      if (side.misses.length) {
        out.push(
          h(
            "ul",
            { class: "cd-misses" },
            side.misses.map(([code, expected, got, moved]) =>
              h(
                "li",
                { class: moved ? "cd-miss moved" : "cd-miss", "data-miss": t(code) },
                h("code", { class: "miss-code" }, t(code)),
                expected === null ? null : [" ", h("span", { class: "expected" }, `expected ${t(expected)}`)],
                got === null ? null : [" ", h("span", { class: "got" }, `got ${t(got)}`)],
              ),
            ),
          ),
        );
      } else if (side.admitted) {
        out.push(h("p", { class: "cd-pass" }, "no misses"));
      }
      if (side.noise.length) {
        out.push(
          h(
            "p",
            { class: "cd-noise" },
            "noise (some samples only): ",
            side.noise.map((n) => [h("code", null, t(n)), " "]),
          ),
        );
      }
      return out;
    }

    function request(side) {
      const q = side.request;
      if (!q) return h("details", { class: "cd-request" }, h("summary", null, "Request: not known"));
      const [source, , url, system, turns, tools, params, cut] = q;
      let said = " (the case as written)";
      if (source === "sent") said = [" as sent", t(url) ? [" to ", h("code", null, t(url))] : null];
      else if (source === "stands_in") said = " (recorded endpoint: what it stands in for)";
      const box = h("details", { class: "cd-request" }, h("summary", null, "Request", said));
      if (system !== null) {
        box.append(
          h("div", { class: "cd-turn", "data-role": "system" }, h("span", { class: "role" }, "system"), h("pre", null, t(system))),
        );
      }
      for (const [role, text, calls, answers] of turns) {
        box.append(
          h(
            "div",
            { class: "cd-turn", "data-role": t(role) },
            h("span", { class: "role" }, t(role), t(answers) ? ` (result of ${t(answers)})` : null),
            t(text) ? h("pre", null, t(text)) : null,
            calls.map((call) => h("code", { class: "call" }, t(call))),
          ),
        );
      }
      if (tools.length) {
        box.append(
          h("p", { class: "cd-label" }, "tools offered"),
          h(
            "ul",
            { class: "cd-tools" },
            tools.map(([name, description, parameters]) =>
              h("li", null, h("code", null, t(name)), t(description) ? ` ${t(description)}` : null, h("pre", null, t(parameters))),
            ),
          ),
        );
      }
      if (params.length) box.append(keys("cd-params", params));
      if (cut) box.append(h("p", { class: "cd-cut" }, "… cut for the report"));
      return box;
    }

    function keys(name, pairs) {
      return h(
        "table",
        { class: name },
        h("tbody", null, pairs.map(([key, value]) => h("tr", null, h("th", null, t(key)), h("td", null, h("code", null, t(value)))))),
      );
    }

    function usage(side) {
      const [tokens, cost, note] = side.usage;
      const waited = side.queued !== null || side.backoff !== null;
      return h(
        "dl",
        { class: "cd-usage" },
        h("dt", null, "latency"),
        h("dd", null, side.ms === null ? "none measured" : `${side.ms} ms`),
        side.stream ? [h("dt", null, "ttft"), h("dd", null, side.ttft === null ? "—" : `${side.ttft} ms`)] : null,
        h("dt", null, "tokens"),
        h(
          "dd",
          null,
          tokens === null
            ? "unknown"
            : `${tokens[0]} prompt${tokens[2] ? ` (${tokens[2]} cached)` : ""} · ${tokens[1]} completion`,
        ),
        h("dt", null, "cost"),
        h("dd", null, cost === null ? t(note) : `$${cost.toFixed(6)}`),
        waited
          ? [
              h("dt", null, "waited"),
              h("dd", null, `${orDash(side.queued)} ms queued · ${orDash(side.backoff)} ms retry backoff`),
            ]
          : null,
      );
    }

    function table(name, heads, rows) {
      return h(
        "table",
        { class: `${name} stack` },
        h("tbody", null, h("tr", null, heads.map((head) => h("th", null, head))), rows),
      );
    }

    function attempts(side) {
      const all = side.attempts;
      if (all.length === 1 && t(all[0][1]) === "ok") {
        const [, , status, , , ms] = all[0];
        const time = ms === null ? "no time measured" : `${ms} ms`;
        return h("p", { class: "cd-meta cd-attempt" }, `1 attempt: HTTP ${status}, ${time}`);
      }
      if (!all.length) return null;
      return table(
        "cd-attempts",
        ["attempt", "transport", "status", "error", "ms"],
        all.map(([n, transport, status, error, message, ms, retryAfter]) =>
          h(
            "tr",
            null,
            h("td", { "data-label": "attempt" }, String(n)),
            h("td", { "data-label": "transport" }, t(transport)),
            h("td", { "data-label": "status" }, orDash(status)),
            h(
              "td",
              { "data-label": "error" },
              t(error) ?? "",
              t(message) ? ` ${t(message)}` : null,
              retryAfter === null ? null : ` (retry after ${retryAfter} s)`,
            ),
            h("td", { "data-label": "ms" }, orDash(ms)),
          ),
        ),
      );
    }

    function samples(side) {
      if (side.samples.length <= 1) return null;
      return [
        table(
          "cd-samples",
          ["sample", "transport", "schema", "task", "misses", "ms"],
          side.samples.map(([sample, transport, schema, task, codes, ms]) =>
            h(
              "tr",
              { "data-sample": sample },
              h("td", { "data-label": "sample" }, String(sample)),
              h("td", { "data-label": "transport" }, t(transport)),
              h("td", { "data-label": "schema" }, t(schema)),
              h("td", { "data-label": "task" }, score(task, 2)),
              h("td", { "data-label": "misses" }, codes.map((code) => [h("code", null, t(code)), " "])),
              h("td", { "data-label": "ms" }, orDash(ms)),
            ),
          ),
        ),
        h("p", { class: "cd-meta" }, "Sample 0 is shown in full."),
      ];
    }

    function raw(side) {
      if (side.raw === null) return h("p", { class: "cd-meta" }, "No exchange in raw.jsonl.");
      const [text, cut, line, size, at] = side.raw;
      const file = t(at); // the only file a case links to, beside the page
      const link = () => h("a", { class: "raw-link", href: file, "data-line": line }, `${file}, line ${line}`);
      if (!t(text)) {
        return h("p", { class: "cd-raw" }, "Raw exchange: ", link(), ` (${size} bytes) beside this report`);
      }
      return h(
        "details",
        { class: "cd-raw" },
        h("summary", null, `Raw exchange (${file}, line ${line}, ${size} bytes)`),
        h("pre", null, t(text)),
        cut ? h("p", { class: "cd-cut" }, "… cut here: the whole exchange is ", link(), " beside this report") : null,
      );
    }

    function column(record) {
      const side = sideOf(record);
      return h(
        "article",
        { class: "cd-side", "data-side": side.side },
        h("h4", null, side.side, t(side.endpoint) ? [" · ", h("span", { class: "mono" }, t(side.endpoint))] : null),
        h(
          "p",
          { class: "cd-meta" },
          t(side.alias) ? ["asked ", h("code", null, t(side.alias))] : null,
          t(side.served) ? [" · served ", h("code", null, t(side.served))] : null,
          t(side.sha) ? [" · request_sha ", h("code", null, t(side.sha))] : null,
        ),
        h(
          "ul",
          { class: "cd-stamps" },
          h("li", { class: "stamp", "data-stamp": "transport", "data-value": t(side.transport) }, "transport ", h("b", null, t(side.transport))),
          h("li", { class: "stamp", "data-stamp": "schema", "data-value": t(side.schema) }, "schema ", h("b", null, t(side.schema))),
          h("li", { class: "stamp", "data-stamp": "task", "data-value": side.score ?? "" }, "task ", h("b", null, score(side.score, 2))),
        ),
        side.admitted ? null : h("p", { class: "cd-unscored" }, t(side.detail)),
        reply(side),
        side.calls.length
          ? [h("p", { class: "cd-label" }, "tool calls"), h("ul", { class: "cd-calls" }, side.calls.map((call) => h("li", null, h("code", null, t(call)))))]
          : null,
        misses(side),
        usage(side),
        attempts(side),
        samples(side),
        request(side),
        raw(side),
      );
    }

    const [known, path, line, expectKeys, expectNote] = expect;
    const [acceptedKeys, acceptedNote] = accepted || [null, null]; // left out of a brief case
    const said = acceptedKeys && acceptedKeys.find(([key]) => t(key) === "disagreement");
    let expected;
    if (expectKeys.length) expected = keys("cd-keys", expectKeys);
    else if (known) expected = h("p", { class: "cd-meta" }, "nothing beyond the defaults (a reply, at most 1200 characters)");
    else expected = h("p", { class: "cd-meta" }, "not known");
    return h(
      "section",
      { class: brief ? "case-detail brief" : "case-detail", "data-id": c.id, "data-gate": c.gate },
      h(
        "header",
        { class: "cd-head" },
        h("span", { class: "cd-gate", "data-gate": c.gate }, c.gate),
        " ",
        h("strong", { class: "mono" }, c.id),
        t(stratum) ? [" ", h("span", { class: "cd-meta" }, t(stratum))] : null,
        h("p", { class: "cd-detail" }, c.detailText),
        disagreement === null
          ? null
          : h(
              "p",
              { class: "cd-delta" },
              "disagreement: ",
              disagreement.length ? disagreement.map((m) => [h("code", null, t(m)), " "]) : "none",
            ),
      ),
      notes.map((note) => h("p", { class: "cd-note" }, t(note))),
      h(
        "section",
        { class: "cd-expect" },
        h("h4", null, "Expected", t(path) ? [" ", h("span", { class: "cd-meta" }, `(${t(path)}:${line})`)] : null),
        expected,
      ),
      h("div", { class: "cd-sides" }, sides.map(column)),
      accepted
        ? h(
            "details",
            { class: "cd-accepted" },
            h("summary", null, "Accepted in the snapshot", said ? [": disagreement ", h("code", null, t(said[1]))] : null),
            t(acceptedNote) ? h("p", { class: "cd-note" }, t(acceptedNote)) : null,
            acceptedKeys !== null
              ? keys("cd-keys", acceptedKeys)
              : t(acceptedNote)
                ? null
                : h("p", { class: "cd-meta" }, "no entry"),
          )
        : null,
      brief ? h("p", { class: "cd-meta cd-brief" }, table.dataset.brief || "") : null,
    );
  }

  // ------------------------------------------------------------------ search

  // the string indexes a case holds: its row's and every text its detail shows
  function wordsOf(c) {
    const [, id, gate, stratum, , miss, , detail, , , , , view] = c.record;
    const [vStratum, disagreement, notes, expect, sides, accepted] = view;
    const out = [];
    const add = (...all) => {
      for (const i of all.flat(3)) if (typeof i === "number") out.push(i);
    };
    add(id, gate, stratum, detail, miss, vStratum, disagreement || [], notes);
    const [, path, , expectKeys, expectNote] = expect;
    add(path, expectKeys, expectNote);
    if (accepted) add(accepted[0] || [], accepted[1]);
    for (const record of sides) {
      const s = sideOf(record);
      add(s.endpoint, s.alias, s.served, s.sha, s.transport, s.schema, s.detail, s.noise, s.calls);
      add(s.misses.map(([code, expected, got]) => [code, expected, got]));
      if (s.request) {
        const [, method, url, system, turns, tools, params] = s.request;
        add(method, url, system, tools, params, turns.map(([role, text, calls, answers]) => [role, text, calls, answers]));
      }
      const [, text, , , finish, why] = s.reply;
      add(text, finish, why, s.usage[2], s.raw ? s.raw[0] : null);
      add(s.attempts.map(([, transport, , error, message]) => [transport, error, message]));
      add(s.samples.map(([, transport, schema, , codes]) => [transport, schema, codes]));
    }
    return Int32Array.from(out);
  }

  // the search index of the cases up to `upTo`: each one's words, its block's texts lower-cased
  function index(upTo) {
    for (; indexed < upTo; indexed++) {
      const c = cases[indexed];
      c.words = wordsOf(c);
      c.block.lower ||= c.block.strings.map((text) => text.toLowerCase());
    }
  }

  // Built a slice at a time when the page is idle after it loads, so the first search does not
  // wait for 20,000 cases to be indexed; a search before it is done indexes the rest itself.
  function indexAhead() {
    index(Math.min(indexed + INDEX_SLICE, cases.length));
    if (indexed < cases.length) idle(indexAhead);
    else performance.mark("parallax:search-ready");
  }

  const idle = (task) => (window.requestIdleCallback ? requestIdleCallback(task) : setTimeout(task, 0));

  // each block's texts lower-cased are searched once, then each case for the texts it holds
  function search(q) {
    index(cases.length);
    const blocks = new Set(cases.map((c) => c.block));
    for (const block of blocks) {
      block.hit = Uint8Array.from(block.lower, (text) => (text.includes(q) ? 1 : 0));
    }
    for (const c of cases) {
      const hit = c.block.hit;
      c.found =
        c.words.some((i) => hit[i] === 1) ||
        c.moved.includes(q) ||
        c.deltaText.includes(q);
    }
  }

  // ------------------------------------------------------------------ the view

  const ORDERS = {
    class: (a, b) => a.rank - b.rank || a.n - b.n,
    // most negative first (the candidate's worst losses), cases without a score last
    delta: (a, b) => (a.delta === null) - (b.delta === null) || a.delta - b.delta || a.n - b.n,
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
      (!q || c.found)
    );
  }

  // The table holds the first `limit` cases kept, in order, and an opened case's detail
  // under its row; "Show more" (or scrolling down to it) adds the next PAGE. The rows are in
  // groups of GROUP, a tbody each, which the browser styles and lays out only while on screen
  // (report.css): a filter at 20,000 cases costs the rows in view, not all of them.
  function draw() {
    const rows = kept.slice(0, limit);
    const groups = [];
    for (let at = 0; at < rows.length; at += GROUP) {
      groups.push(h("tbody", null, rows.slice(at, at + GROUP).map((c) => [rowOf(c), c.detail])));
    }
    table.replaceChildren(table.tHead, ...groups);
    const left = kept.length - Math.min(limit, kept.length);
    more.hidden = left === 0;
    moreButton.textContent = `Show ${Math.min(PAGE, left)} more (${left} not shown yet)`;
    shown.textContent = `${kept.length} of ${cases.length} cases`;
  }

  function arrange() {
    const q = state.q.toLowerCase();
    if (q) search(q);
    const order = (sorted[state.sort] ||= cases.slice().sort(ORDERS[state.sort]));
    kept = order.filter((c) => matches(c, q));
    limit = PAGE;
    draw();
  }

  // the table holds `c`'s row (its place among the cases kept, if it is kept)
  function reach(c) {
    const at = kept.indexOf(c);
    if (at >= limit) {
      limit = (Math.floor(at / PAGE) + 1) * PAGE;
      draw();
    }
  }

  function close() {
    if (!opened) return;
    opened.detail.remove();
    opened.detail = null;
    opened.row?.querySelector("a.open")?.setAttribute("aria-expanded", "false");
    opened = null;
  }

  function open(c, scroll) {
    if (opened === c) return;
    close();
    reach(c);
    const detail = h("tr", { class: "detail" });
    const cell = detail.insertCell();
    cell.colSpan = Number(table.dataset.columns) || 7;
    cell.append(detailOf(c));
    const row = rowOf(c);
    c.detail = detail;
    if (row.isConnected) row.after(detail);
    row.querySelector("a.open")?.setAttribute("aria-expanded", "true");
    opened = c;
    if (scroll && row.isConnected) row.scrollIntoView({ block: "start" });
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
    const c = state.case ? byId.get(state.case) : undefined;
    if (c) {
      open(c, scroll);
    } else {
      state.case = "";
      close();
      if (scroll) form.scrollIntoView({ block: "start" });
    }
    write();
  }

  function showMore() {
    if (more.hidden) return;
    limit += PAGE;
    draw();
  }

  function start(blocks) {
    cases = blocks.flatMap((block) => block.cases.map((record) => caseOf(block, record)));
    cases.sort((a, b) => a.n - b.n);
    byId = new Map(cases.map((c) => [c.id, c]));
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
    moreButton.addEventListener("click", showMore);
    new IntersectionObserver((seen) => seen.some((e) => e.isIntersecting) && showMore(), {
      rootMargin: "600px",
    }).observe(more);
    form.hidden = false;
    holder.hidden = false;
    restore(Boolean(read(location.hash).case));
    performance.mark("parallax:filters-ready"); // bench/report_scale.py reads when that was
    idle(indexAhead);
  }

  const elements = Array.from(document.querySelectorAll("script.case-data"));
  Promise.all(elements.map(inflate)).then(start, (error) => {
    holder.hidden = false;
    table.hidden = true;
    holder.prepend(h("p", { class: "alert" }, `The cases could not be read in this browser: ${error}`));
  });
})();
