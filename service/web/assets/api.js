// Calls to the service: the API key from the sign-in box (kept in this tab's sessionStorage), JSON in and out, and
// errors carrying the service's own message (every 4xx says what to fix).

const KEY = "plumbline.key";

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

export const session = {
  key: () => sessionStorage.getItem(KEY),
  signIn: (key) => sessionStorage.setItem(KEY, key.trim()),
  signOut: () => sessionStorage.removeItem(KEY),
};

function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) {
    for (const v of Array.isArray(value) ? value : [value]) {
      if (v !== undefined && v !== null && v !== "") search.append(name, v);
    }
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

export async function api(method, path, { body, params, text = false } = {}) {
  const headers = { Accept: text ? "text/plain, application/x-ndjson" : "application/json" };
  const key = session.key();
  if (key) headers["X-API-Key"] = key;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path + query(params), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, `the service did not answer (${err.message}): is it running?`);
  }
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`;
    try {
      const payload = await response.json();
      if (payload && payload.detail) detail = String(payload.detail);
    } catch {
      // not JSON: keep the status line
    }
    const error = new ApiError(response.status, detail);
    if (response.status === 401) window.dispatchEvent(new CustomEvent("plumbline:unauthorized"));
    throw error;
  }
  if (text) return response.text();
  return response.status === 204 ? null : response.json();
}

export const get = (path, params) => api("GET", path, { params });
export const post = (path, body) => api("POST", path, { body });
export const patch = (path, body) => api("PATCH", path, { body });
