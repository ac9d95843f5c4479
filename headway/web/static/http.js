// What the owner's panels share when they call the JSON API: the headers, and the
// `error` sentence of an error answer.

export const JSON_HEADERS = { Accept: "application/json", "Content-Type": "application/json" };

/** The `error` message of a JSON error answer, if it has one. */
export async function errorOf(response) {
  try {
    return (await response.json()).error;
  } catch {
    return null;
  }
}
