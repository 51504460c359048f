// The action page: keep the tree's <details> (and the open tracebacks) as the operator left
// them when htmx swaps in a fresh live fragment. Without JavaScript the page works the same;
// only a refresh of the page resets what was opened.
(function () {
  "use strict";
  // details id -> open, for the ones the operator opened or closed.
  var state = new Map();

  // Record what the operator does (a click, or Enter/Space on a summary, which clicks it),
  // not "toggle" events: a freshly swapped-in <details open> fires one too.
  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!(target instanceof Element) || target.closest("a")) {
      return;
    }
    var summary = target.closest("summary");
    var details = summary && summary.parentElement;
    if (details instanceof HTMLDetailsElement && details.id && details.closest("[data-keep-open]")) {
      state.set(details.id, !details.open);
    }
  }, true);

  document.addEventListener("htmx:load", function (event) {
    var root = event.target;
    if (!(root instanceof Element) || !root.matches("[data-keep-open]")) {
      return;
    }
    state.forEach(function (open, id) {
      var el = document.getElementById(id);
      if (el instanceof HTMLDetailsElement && el.open !== open) {
        el.open = open;
      }
    });
  });
})();
