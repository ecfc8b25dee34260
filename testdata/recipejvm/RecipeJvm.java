// RecipeJvm is the JVM program of the recipe tests (receiver's
// recipes_test.go): java RecipeJvm GCS [TOKEN] loads RecipeJvm$Known1 in
// ten class loaders it then drops, runs GCS full collections
// (System.gc(), which unload those ten), loads the five classes
// RecipeJvm$Known1 … Known5, runs two threads named recipe-worker-0 and
// recipe-worker-1, and prints "done".
// java RecipeJvm time LOADS CALLS [TOKEN] times LOADS class loads
// (RecipeJvm$Known1, each in a class loader of its own) and CALLS calls of
// a method the JIT does not inline, each after as many to warm up, and
// prints "load NS" and "call NS", the time of one (0 for no loads).
// TOKEN only marks its command line.
import java.io.InputStream;

public class RecipeJvm {
    static class Known1 {}
    static class Known2 {}
    static class Known3 {}
    static class Known4 {}
    static class Known5 {}

    // A class loader of its own for each load of Known1's bytes.
    static class OneClass extends ClassLoader {
        OneClass() { super(null); }
        Class<?> define(byte[] b) { return defineClass("RecipeJvm$Known1", b, 0, b.length); }
    }

    static long sum;

    // called is the timed method; -XX:CompileCommand=dontinline keeps it
    // a call.
    static void called(int i) { sum += i; }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("time")) {
            time(Integer.parseInt(args[1]), Integer.parseInt(args[2]));
            return;
        }
        int gcs = Integer.parseInt(args[0]);
        byte[] b = known1();
        for (int i = 0; i < 10; i++) {
            new OneClass().define(b);
        }
        for (int i = 0; i < gcs; i++) {
            System.gc();
        }
        for (int i = 1; i <= 5; i++) {
            Class.forName("RecipeJvm$Known" + i);
        }
        Thread[] workers = new Thread[2];
        for (int i = 0; i < workers.length; i++) {
            workers[i] = new Thread(() -> {}, "recipe-worker-" + i);
            workers[i].start();
        }
        for (Thread w : workers) {
            w.join();
        }
        System.out.println("done");
    }

    // known1 returns the bytes of RecipeJvm$Known1's class file.
    static byte[] known1() throws Exception {
        try (InputStream in = RecipeJvm.class.getResourceAsStream("RecipeJvm$Known1.class")) {
            return in.readAllBytes();
        }
    }

    static void time(int loads, int calls) throws Exception {
        byte[] b = known1();
        for (int i = 0; i < loads; i++) { // warm up the loading path
            new OneClass().define(b);
        }
        long t0 = System.nanoTime();
        for (int i = 0; i < loads; i++) {
            new OneClass().define(b);
        }
        long load = loads > 0 ? (System.nanoTime() - t0) / loads : 0;
        for (int i = 0; i < calls; i++) { // warm up: the JIT compiles the loop
            called(i);
        }
        t0 = System.nanoTime();
        for (int i = 0; i < calls; i++) {
            called(i);
        }
        long call = (System.nanoTime() - t0) / calls;
        System.out.println("load " + load);
        System.out.println("call " + call);
    }
}
