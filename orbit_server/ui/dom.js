// Element builders. Data only ever becomes text nodes or attribute values (never markup),
// so nothing the API returns is parsed as HTML.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(el, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function replace(parent, ...children) {
  parent.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined));
}

// ------------------------------------------------------------------ formatting

export function stateBadge(state) {
  return h("span", { class: `state state-${state}`, "data-state": state }, state);
}

export function isoTime(ms) {
  return ms === null || ms === undefined ? "" : new Date(ms).toISOString().replace(".000Z", "Z");
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "";
  const abs = Math.abs(ms);
  const sign = ms < 0 ? "-" : "";
  const two = (big, bigUnit, small, smallUnit) =>
    `${sign}${big} ${bigUnit}${small ? ` ${small} ${smallUnit}` : ""}`;
  if (abs < 1000) return `${sign}${Math.round(abs)} ms`;
  if (abs < 60_000) return `${sign}${(abs / 1000).toFixed(abs < 10_000 ? 2 : 1)} s`;
  if (abs < 3_600_000) return two(Math.floor(abs / 60_000), "min", Math.round((abs % 60_000) / 1000), "s");
  if (abs < 86_400_000) return two(Math.floor(abs / 3_600_000), "h", Math.round((abs % 3_600_000) / 60_000), "min");
  return two(Math.floor(abs / 86_400_000), "d", Math.round((abs % 86_400_000) / 3_600_000), "h");
}

// An instant as "12 s ago", with the exact UTC time in its tooltip.
export function ago(ms, now = Date.now()) {
  if (ms === null || ms === undefined) return h("span", { class: "muted" }, "—");
  const text = ms <= now ? `${duration(now - ms)} ago` : `in ${duration(ms - now)}`;
  return h("time", { datetime: isoTime(ms), title: isoTime(ms) }, text);
}

export function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

export function capability(cap) {
  return cap ? `${cap.handler}@${cap.handler_version}/${cap.payload_version}` : "";
}

// IDs begin with their creation time (orbit_wire/ids.py): the tail tells them apart.
export function shortId(id) {
  return id ? `…${id.slice(-10)}` : "";
}

export function json(value) {
  return h("pre", {}, JSON.stringify(value, null, 2));
}

export function facts(pairs) {
  return h("dl", { class: "facts" },
    pairs.filter(([, v]) => v !== undefined).map(([k, v]) => [h("dt", {}, k),
      h("dd", { "data-fact": k }, v === null ? h("span", { class: "muted" }, "—") : v)]));
}

export function table(headers, rows, attrs = {}) {
  return h("table", attrs,
    h("thead", {}, h("tr", {}, headers.map((t) => h("th", {}, t)))),
    h("tbody", {}, rows));
}
