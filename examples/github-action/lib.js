// Shared helpers of the action: inputs, outputs, state and the HTTP calls.
'use strict';
const fs = require('fs');

function input(name, required) {
  const value = (process.env[`INPUT_${name.replace(/ /g, '_').toUpperCase()}`] || '').trim();
  if (required && !value) throw new Error(`input ${name} is required`);
  return value;
}

function appendTo(fileVar, key, value) {
  const file = process.env[fileVar];
  if (file) fs.appendFileSync(file, `${key}=${value}\n`);
}

async function call(method, url, token, body) {
  const res = await fetch(url, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      accept: 'application/json, application/problem+json',
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try { json = text ? JSON.parse(text) : {}; } catch { json = { detail: text }; }
  if (!res.ok) {
    const detail = json.detail || json.title || text;
    throw new Error(`${method} ${url}: ${res.status} ${detail}`);
  }
  return json;
}

module.exports = { input, appendTo, call };
