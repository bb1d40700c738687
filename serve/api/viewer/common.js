// Shared by the viewer pages: same-origin API calls with the session cookie and the CSRF header.
"use strict";
async function api(method, path, body) {
  const init = { method, headers: { "X-UIS1-CSRF": "1" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) { location.reload(); throw new Error("signed out"); }
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) { throw new Error((data && data.detail) ? JSON.stringify(data.detail) : response.statusText); }
  return data;
}
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}
function when(iso) { return iso ? new Date(iso).toLocaleString() : "–"; }
function seconds(value) { return value == null ? "–" : value.toFixed(2) + " s"; }
async function signOut() { await api("DELETE", "/v1/session"); location.reload(); }
