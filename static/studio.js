// Every page: what the Content-Security-Policy keeps out of the templates (no inline script,
// no eval, no style attribute), done from this one static file.
//
// - Polling pauses while the tab is hidden: a fragment built by macros.html's poll() has
//   data-poll and hx-trigger="every Ns, stepwise:visible"; its requests are cancelled while
//   the page is hidden, and it refreshes at once when the page is shown again.
// - Bars sized by data (data-left / data-width, in percent) get their geometry through the
//   CSSOM, which the policy allows, instead of a style="" attribute, which it forbids.
// - A time range ([data-time-range]) is a preset or a custom from/to, never both: choosing a
//   preset clears the from/to ([data-custom-time]), typing a from/to chooses Custom. In the
//   capture phase, so the form's htmx request (on "change") already sends the cleared fields.
(function () {
  "use strict";

  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (document.visibilityState !== "visible" && elt instanceof Element && elt.hasAttribute("data-poll")) {
      event.preventDefault();
    }
  });

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState !== "visible" || typeof htmx === "undefined") {
      return;
    }
    document.querySelectorAll("[data-poll]").forEach(function (elt) {
      htmx.trigger(elt, "stepwise:visible");
    });
  });

  document.addEventListener("change", function (event) {
    var target = event.target;
    var form = target instanceof Element ? target.form : null;
    if (!form || !form.querySelector("[data-time-range]")) {
      return;
    }
    if (target.matches("[data-time-range] input[type=radio]") && !target.hasAttribute("data-custom")) {
      form.querySelectorAll("[data-custom-time]").forEach(function (input) { input.value = ""; });
    } else if (target.matches("[data-custom-time]") && target.value) {
      var custom = form.querySelector("[data-time-range] [data-custom]");
      if (custom) {
        custom.checked = true;
      }
    }
  }, true);

  var SIZED = "[data-left], [data-width]";

  function place(bar) {
    if (bar.dataset.left !== undefined) {
      bar.style.left = bar.dataset.left + "%";
    }
    if (bar.dataset.width !== undefined) {
      bar.style.width = bar.dataset.width + "%";
    }
  }

  function size(root) {
    if (root instanceof Element && root.matches(SIZED)) {
      place(root);
    }
    if (root instanceof Element || root instanceof Document) {
      root.querySelectorAll(SIZED).forEach(place);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    size(document);
  });
  document.addEventListener("htmx:load", function (event) {
    size(event.target);
  });
})();
