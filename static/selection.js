// Actions list: the header's "select all" box over the rows' boxes of the selection form
// (templates/actions/_list.html), which feed "Retry selected…" / "Cancel selected…".
//
// - The box is rendered hidden (without JavaScript it would do nothing) and shown here.
// - Ticking it ticks every row of this page, clearing it clears them; it acts on the boxes
//   it names in aria-controls, so it never reaches a row of another page.
// - Some rows ticked, it is mixed (indeterminate, which assistive technology reads as
//   "mixed"); a live count beside the buttons says how many are selected.
// - By delegation on the document: htmx swaps the list (pager, filter) and this still holds.
(function () {
  "use strict";

  var ALL = "[data-select-all]";

  function rows(all) {
    var form = all.form || all.closest("form");
    var ids = (all.getAttribute("aria-controls") || "").split(/\s+/).filter(Boolean);
    return ids
      .map(function (id) { return document.getElementById(id); })
      .filter(function (box) { return box && box.form === form && !box.disabled; });
  }

  function reflect(all) {
    var boxes = rows(all);
    var ticked = boxes.filter(function (box) { return box.checked; }).length;
    all.checked = boxes.length > 0 && ticked === boxes.length;
    all.indeterminate = ticked > 0 && ticked < boxes.length;
    var form = all.form || all.closest("form");
    var count = form ? form.querySelector("[data-selection-count]") : null;
    if (count) {
      count.textContent = ticked ? ticked + " of " + boxes.length + " on this page selected" : "";
    }
  }

  function prepare(root) {
    if (!(root instanceof Element || root instanceof Document)) {
      return;
    }
    var found = root instanceof Element && root.matches(ALL) ? [root] : [];
    root.querySelectorAll(ALL).forEach(function (all) { found.push(all); });
    found.forEach(function (all) {
      all.hidden = false;
      reflect(all);
    });
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (!(target instanceof HTMLInputElement) || target.type !== "checkbox" || !target.form) {
      return;
    }
    if (target.matches(ALL)) {
      rows(target).forEach(function (box) { box.checked = target.checked; });
      reflect(target);
      return;
    }
    target.form.querySelectorAll(ALL).forEach(function (all) {
      if (rows(all).indexOf(target) !== -1) {
        reflect(all);
      }
    });
  });

  document.addEventListener("DOMContentLoaded", function () { prepare(document); });
  document.addEventListener("htmx:load", function (event) { prepare(event.target); });
  // A page restored from the back/forward cache keeps the ticks it had: show them.
  window.addEventListener("pageshow", function () { prepare(document); });
})();
