// The report page's only script. It draws nothing (the charts are SVG in
// the page); it counts what went wrong (script errors, failed loads,
// console errors) and what the page loaded, into attributes of <html> that
// a headless browser's test reads back, and switches the op kinds on the
// roofline on and off.
(function () {
  var root = document.documentElement;
  root.setAttribute("data-errors", "0");
  function fail(message) {
    root.setAttribute("data-errors", String(Number(root.getAttribute("data-errors")) + 1));
    var list = document.getElementById("page-errors");
    if (list) {
      var item = document.createElement("li");
      item.textContent = String(message);
      list.appendChild(item);
    }
  }
  window.addEventListener("error", function (event) {
    var target = event.target || {};
    fail(event.message || "failed to load " + (target.src || target.href || "a resource"));
  }, true);
  window.addEventListener("unhandledrejection", function (event) { fail(event.reason); });
  var consoleError = console.error;
  console.error = function () {
    fail(Array.prototype.join.call(arguments, " "));
    return consoleError.apply(console, arguments);
  };
  document.addEventListener("securitypolicyviolation", function (event) {
    fail("blocked a request to " + event.blockedURI);
  });
  window.addEventListener("load", function () {
    var boxes = document.querySelectorAll("input.show-ops");
    Array.prototype.forEach.call(boxes, function (box) {
      var section = box.closest("section");
      var apply = function () { if (section) { section.classList.toggle("show-ops", box.checked); } };
      box.addEventListener("change", apply);
      apply();
    });
    var loaded = performance.getEntriesByType ? performance.getEntriesByType("resource") : [];
    root.setAttribute("data-resources", String(loaded.length));
    root.setAttribute("data-ready", "yes");
  });
})();
