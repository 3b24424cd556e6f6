// The JSON API (docs/http-api.md) with the bearer credential of this tab. The credential is
// kept in sessionStorage (gone with the tab) and sent in the Authorization header only.

const KEY = "orbit.credential";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function credential() {
  return sessionStorage.getItem(KEY);
}

// Accepts `credential_id.secret` or the JSON of a credentials file.
export function parseCredential(text) {
  const trimmed = text.trim();
  if (trimmed.startsWith("{")) {
    let file;
    try { file = JSON.parse(trimmed); } catch { return null; }
    if (typeof file.credential_id === "string" && typeof file.secret === "string") {
      return `${file.credential_id}.${file.secret}`;
    }
    return null;
  }
  return /^[0-9a-f]{32}\.\S+$/.test(trimmed) ? trimmed : null;
}

export function signIn(bearer) {
  sessionStorage.setItem(KEY, bearer);
}

export function signOut() {
  sessionStorage.removeItem(KEY);
}

export async function call(method, path, { params, body } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [key, value] of Object.entries(params || {})) {
    if (value === null || value === undefined || value === "") continue;
    for (const item of Array.isArray(value) ? value : [value]) url.searchParams.append(key, item);
  }
  const headers = { Accept: "application/json", Authorization: `Bearer ${credential() || ""}` };
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url, init);
  let answer = null;
  try { answer = await response.json(); } catch { answer = null; }
  if (!response.ok) {
    const err = (answer && answer.error) || {};
    throw new ApiError(response.status, err.code || "HTTP_" + response.status,
      err.message || response.statusText);
  }
  return answer;
}

export const get = (path, params) => call("GET", path, { params });
export const post = (path, body) => call("POST", path, { body });
